"""The answers to the model's tool calls: the workspace, read through the sandbox, within a bound of time.

The model asks for more code than its unit (``tool_request``); the editor side answers, because the code is
here and not on the Mac pair. The sandbox (``k3lsp.tools.sandbox``) decides what may be read; this module runs it
off the event loop, bounds how long the model (and the audit) waits, and tells the front end about every read
and every refusal (the user can audit the auditor).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from k3lsp.tools import sandbox, symbols

OnTool = Callable[[dict, bool, str], None]  # (tool_request, ok, answer)


class ToolAnswerer:
    """Answers tool calls for every audit of one pool; ``on_tool`` hears of each."""

    def __init__(self, on_tool: OnTool | None = None):
        self.on_tool = on_tool
        self._warmed: dict[Path, float] = {}  # workspace -> when its index was last asked to refresh

    def prepare(self, root: Path | None) -> None:
        """An audit with tools is about to start: the workspace's symbol index builds (or refreshes) in the
        background meanwhile, so the model's first ``find_definition`` finds it ready. Asked once per refresh
        period, not per unit (a workspace audit starts tens of thousands)."""
        now = time.monotonic()
        if root is not None and now - self._warmed.get(root, -symbols.REFRESH_SECONDS) >= symbols.REFRESH_SECONDS:
            self._warmed[root] = now
            symbols.warm(root)

    async def answer(self, root: Path | None, request: dict, caller: str | None = None) -> tuple[bool, str]:
        """(ok, text) for one ``tool_request``; a refusal is an ordinary answer the model reads and acts on.
        ``caller``: the workspace-relative file under audit (find_definition ranks the definitions it uses first).

        No root (an untitled buffer, a file outside the workspace folder): no tools at all, since the file's own
        folder may be the home directory."""
        if root is None:
            ok, text = False, f"{request['tool']}: no workspace folder holds this file, so no workspace tools"
        else:
            try:
                call = asyncio.to_thread(sandbox.run_tool, root, request["tool"], request["args"], caller)
                ok, text = await asyncio.wait_for(call, sandbox.TOOL_SECONDS)
            except TimeoutError:  # the model (and the audit) must not wait for ever; the thread ends on its own
                ok, text = False, f"{request['tool']}: no answer within {sandbox.TOOL_SECONDS:g} s; ask for less"
        if self.on_tool is not None:
            self.on_tool(request, ok, text)
        return ok, text
