"""Session in-process: what happens after `shutdown` (the LSP tests cannot see between shutdown and exit), and what
an audit asks of the splitter process (the LSP tests cannot count it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from k3lsp.lsp import workspace
from k3lsp.lsp.session import FileReport, Session
from k3lsp.lsp.workspace import SHUTTING_DOWN, WorkspaceReport
from k3lsp.units.splitting import Splitter
from k3lsp.wire.cache import ResultCache
from k3lsp.witnesses.analyze import find
from tests.lsp import scripted
from tests.lsp import test_witnesses as witnessed
from tests.support.fake_daemon import FakeDaemon


async def test_after_shutdown_no_audit_starts_and_the_client_stays_closed(tmp_path):
    (tmp_path / "a.c").write_text("int a(void)\n{\n\treturn 0;\n}\n")
    session = Session(LanguageServer("k3lsp-test", "0"), ResultCache(tmp_path / "cache.sqlite"))
    session.root = tmp_path
    await session.shutdown()
    result = await asyncio.wait_for(session.audit_and_wait((tmp_path / "a.c").as_uri()), 5)
    assert result == FileReport(error=SHUTTING_DOWN)
    summary = await asyncio.wait_for(workspace.audit(session), 5)
    assert summary == WorkspaceReport(files=0, error=SHUTTING_DOWN)
    assert not session._tasks  # nothing reconnected to the daemon:
    assert all(c._transport._sock is None for c in session.pool.connections)


@contextlib.asynccontextmanager
async def initialized(root: Path, tmp_path: Path, fake, settings: dict | None = None) -> AsyncIterator[Session]:
    """A session in this process on the fake daemon, initialized on ``root`` as a client would, shut down after."""
    ls = LanguageServer("k3lsp-test", "0")
    session = Session(ls, ResultCache(tmp_path / "cache.sqlite"), transport=FakeDaemon.factory(fake.path))
    params = lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(), root_uri=root.as_uri(), initialization_options=settings
    )
    for _ in ls.protocol.lsp_initialize(params):  # pygls's own set-up of the workspace (no handler of ours)
        pass
    session.initialize(params)
    await session.initialized()
    try:
        yield session
    finally:
        await session.shutdown()


async def test_a_workspace_audit_splits_each_file_once(tmp_path, fake, monkeypatch):
    """Every unit result re-sent the whole file to the splitter process to re-split it (an open file of N units
    audited by the daemons: N + 2 splits, a closed one 2). The units of the split an audit started from are kept."""
    splits: list[int] = []
    real_split = Splitter.split

    async def counted(self: Splitter, text: str, macros) -> tuple:
        splits.append(len(text))
        return await real_split(self, text, macros)

    monkeypatch.setattr(Splitter, "split", counted)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "closed.c").write_text(scripted.DEMO_C)
    opened = scripted.DEMO_C.replace("return 0", "return 1").replace("idx", "i")  # other units: not cache hits
    (root / "open.c").write_text(opened)
    never_asks = {"askAboveUnits": 0}  # no cost estimate, which splits a sample of the files before the audit
    async with initialized(root, tmp_path, fake, never_asks) as session:
        open_uri = (root / "open.c").as_uri()
        session.ls.workspace.put_text_document(lsp.TextDocumentItem(open_uri, "c", 1, opened))
        report = await asyncio.wait_for(workspace.audit(session), 60)
        assert report == WorkspaceReport(files=2)
        for uri in (open_uri, (root / "closed.c").as_uri()):
            assert [s.finding.cwe for s in session.docs[uri].shown] == [787, 129], uri  # both units answered
    assert sorted(splits) == sorted([len(opened), len(scripted.DEMO_C)])  # one split per file


@pytest.mark.skipif(find("cppcheck") is None, reason="cppcheck is not installed: apt-get install cppcheck")
async def test_a_workspace_audit_runs_the_witnesses_on_closed_files_too(tmp_path, fake):
    """The workspace audit sent analyzer alerts for open files only: a closed file went to the model without them, and
    its alerts were never shown. Now each file is a job of the audit service, witnesses included."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "bug.c").write_text(witnessed.SOURCE)
    async with initialized(root, tmp_path, fake, {"witnesses": ["cppcheck"]}) as session:
        assert await asyncio.wait_for(workspace.audit(session), 60) == WorkspaceReport(files=1)
        doc = session.docs[(root / "bug.c").as_uri()]  # kept: it has something to show
        shown = sorted(n.diagnostic.range.start.line for n in doc.notices if n.diagnostic.source == "cppcheck")
    assert shown == [witnessed.OVERFLOW_LINE, witnessed.DOUBLE_FREE_LINE]
