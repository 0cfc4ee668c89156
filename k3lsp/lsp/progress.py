"""Work-done progress (``$/progress``) and diagnostic refreshes, at a rate an editor can take.

A workspace audit of a kernel tree finishes tens of thousands of units: one ``$/progress`` report or one
``workspace/diagnostic/refresh`` each would flood the client (every refresh makes it pull every open
document again). So reports go out at most once per REPORT_SECONDS unless the percentage moved, and refreshes
at most once per REFRESH_SECONDS, the last one always sent; so do status notifications whose only news is the
queue's counts (STATUS_SECONDS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

REPORT_SECONDS = 1.0
REFRESH_SECONDS = 0.25
STATUS_SECONDS = 0.25  # a status notification whose state is unchanged (queue counts only) waits this long

Report = Callable[[int, str], None]  # (units or files done, a note for the status line)


@contextlib.asynccontextmanager
async def bar(ls: LanguageServer, enabled: bool, title: str, total: int) -> AsyncIterator[Report]:
    """Work-done progress (uuid tokens, forgotten after end: pygls #607); cancelling it in the editor cancels
    the task that holds it. ``total`` 0: an indefinite bar (an explanation)."""
    if not enabled:
        yield lambda done, note: None
        return
    token, progress = str(uuid.uuid4()), ls.work_done_progress
    try:
        await progress.create_async(token)
    except Exception as exc:
        log.warning("the client refused a progress token: %s", exc)
        yield lambda done, note: None
        return
    task, loop = asyncio.current_task(), asyncio.get_running_loop()

    def on_cancel(future: Any) -> None:  # window/workDoneProgress/cancel cancels the pygls future
        if future.cancelled() and task is not None:
            loop.call_soon_threadsafe(task.cancel)

    progress.tokens[token].add_done_callback(on_cancel)
    start = lsp.WorkDoneProgressBegin(
        title=title, cancellable=True, percentage=0 if total else None, message=f"0/{total}" if total else None
    )
    progress.begin(token, start)
    last_at, last_pct = 0.0, None

    def report(done: int, note: str) -> None:
        nonlocal last_at, last_pct
        pct = int(100 * done / total) if total else None
        now = time.monotonic()
        if pct == last_pct and now - last_at < REPORT_SECONDS:
            return
        last_at, last_pct = now, pct
        progress.report(token, lsp.WorkDoneProgressReport(percentage=pct, message=note or f"{done}/{total}"))

    try:
        yield report
    finally:
        progress.end(token, lsp.WorkDoneProgressEnd())
        progress.tokens.pop(token, None)


class Paced:
    """Calls ``send`` at most once per ``seconds``; a request in between is sent late (once), never dropped."""

    def __init__(self, send: Callable[[], None], seconds: float):
        self._send_now, self._seconds = send, seconds
        self._last = 0.0
        self._pending: asyncio.TimerHandle | None = None

    def request(self) -> None:
        if self._pending is not None:
            return
        wait = self._last + self._seconds - time.monotonic()
        if wait <= 0:
            self.send()
        else:
            self._pending = asyncio.get_running_loop().call_later(wait, self.send)

    def send(self) -> None:
        """Send now (a change that must not wait), and forget a late one."""
        self.cancel()
        self._last = time.monotonic()
        self._send_now()

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
