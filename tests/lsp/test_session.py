"""Session in-process: what happens after `shutdown` (the LSP tests cannot see between shutdown and exit)."""

from __future__ import annotations

import asyncio

from pygls.lsp.server import LanguageServer

from k3lsp.lsp.session import FileReport, Session
from k3lsp.lsp.workspace import SHUTTING_DOWN, WorkspaceReport
from k3lsp.wire.cache import ResultCache


async def test_after_shutdown_no_audit_starts_and_the_client_stays_closed(tmp_path):
    (tmp_path / "a.c").write_text("int a(void)\n{\n\treturn 0;\n}\n")
    session = Session(LanguageServer("k3lsp-test", "0"), ResultCache(tmp_path / "cache.sqlite"))
    session.root = tmp_path
    await session.shutdown()
    result = await asyncio.wait_for(session.audit_and_wait((tmp_path / "a.c").as_uri()), 5)
    assert result == FileReport(error=SHUTTING_DOWN)
    summary = await asyncio.wait_for(session.audit_workspace(), 5)
    assert summary == WorkspaceReport(files=0, error=SHUTTING_DOWN)
    assert not session._tasks  # nothing reconnected to the daemon:
    assert all(c._transport._sock is None for c in session.pool.connections)
