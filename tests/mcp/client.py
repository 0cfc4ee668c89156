"""`k3lsp mcp` as a coding agent reaches it: a real process on stdio, driven by the official SDK's client session."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

WAIT = 120.0  # seconds a call may take on a loaded 2-core machine


def command(root: Path, endpoint: str, *flags: str) -> list[str]:
    """The server's command line: rooted at ``root``, on the daemon at ``endpoint``."""
    return [sys.executable, "-m", "k3lsp", "mcp", "--root", str(root), "--endpoint", endpoint, *flags]


@contextlib.asynccontextmanager
async def session(root: Path, endpoint: str, *flags: str, cache: Path) -> AsyncIterator[ClientSession]:
    """An initialized client session on a new ``k3lsp mcp`` process with its own result cache ``cache``."""
    program, *args = command(root, endpoint, *flags)
    env = os.environ | {"K3LSP_CACHE_DIR": str(cache)}
    params = StdioServerParameters(command=program, args=args, env=env, cwd=root)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


def answer(result: CallToolResult) -> dict[str, Any]:
    """A successful call's structured result (the test fails with the server's words otherwise)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # the same, for clients without it
    return result.structured_content


def refusal(result: CallToolResult) -> str:
    """A refused call's one sentence."""
    assert result.is_error, result.structured_content
    return result.content[0].text
