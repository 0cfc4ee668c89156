"""The language server on a kernel-sized workspace, on the fake daemon: nothing waits for the daemon, a
workspace audit covers every file, refreshes and progress come at a rate a client can take, and hovers are
answered while it runs. (What these cost in milliseconds is measured in bench/kernel_scale.py, not here.)"""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.lsp import editor

FILES = 30_000


@pytest.fixture
def root(tmp_path):
    return scripted.workspace(tmp_path)


async def test_an_opened_file_shows_its_cached_findings_while_the_daemon_is_still_being_reached(fake, root, tmp_path):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:  # once, to fill the cache
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
    fake.write(scripted.FAKE | {"hello_seconds": 60})  # the daemon takes a minute to answer a hello
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:  # a restart
        uri = ed.open("demo.c")
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2, timeout=30)
        status = await asyncio.wait_for(ed.status(), 30)  # answered from what is known: no hello waited for
    assert sorted(d.code for d in diags) == ["CWE-129", "CWE-787"]
    assert status["state"]["state"] == "connecting" and status["backend"] is None  # the hello still on its way
    assert status["counters"]["cached"] == 2 and status["counters"]["sent"] == 0


@pytest.fixture
def kernel_tree(tmp_path):
    """FILES small C files in 300 folders; every 1000th has a function the fake reports a finding for."""
    root = tmp_path / "linux"
    for d in range(300):
        folder = root / f"drivers{d:03d}"
        folder.mkdir(parents=True)
        for i in range(FILES // 300):
            n = d * (FILES // 300) + i
            name = "copy_msg" if n % 1000 == 0 else f"fn_{n}"
            (folder / f"f{i:03d}.c").write_text(f"static int {name}(int a)\n{{\n\treturn a + {n};\n}}\n")
    return root


async def test_a_workspace_audit_of_30000_files_covers_them_all_and_stays_responsive(fake, kernel_tree, tmp_path):
    finding = {k: v for k, v in scripted.FAKE["units"]["copy_msg"]["findings"][0].items() if k != "fix"}
    fake.write({"units": {"copy_msg": {"findings": [finding | {"start_line": 3, "end_line": 3, "trace": []}]}}})
    hovers: list[float] = []
    async with editor(kernel_tree, profile="pull", fake=fake, cache_dir=tmp_path / "c") as ed:
        opened = ed.open("drivers000/f000.c")
        loop = asyncio.get_running_loop()
        started = loop.time()
        audit = asyncio.ensure_future(ed.command("k3lsp.auditWorkspace", "all", timeout=1200))  # no scope question
        while not audit.done():
            tic = loop.time()
            await ed.client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(opened), lsp.Position(2, 1))
            )
            hovers.append(loop.time() - tic)
            await asyncio.sleep(0.05)
        report = audit.result()
        elapsed = loop.time() - started
        status = await ed.status()
        refreshes = ed.refreshes
        token = ed.progress_token("k3 audit workspace")
        reports = [v for v in ed.client.progress_reports[token] if isinstance(v, lsp.WorkDoneProgressReport)]
    assert report == {"files": FILES, "error": None, "left_out": 0, "cancelled": False}
    assert status["counters"]["units"] >= FILES and status["counters"]["sent"] == FILES
    assert status["documents"] == FILES // 1000  # only the files with a finding (the open one is one of them)
    assert len(hovers) > 10  # answered all along the audit, not after it
    span = refreshes[-1] - refreshes[0] if len(refreshes) > 1 else 1.0
    assert len(refreshes) <= 5 * max(span, 1.0), (len(refreshes), span)  # at most a handful per second
    assert len(reports) <= 101 + elapsed + 2, (len(reports), elapsed)  # one report per percent or per second
    print(f"{FILES} files in {elapsed:.0f} s; hover p99 {sorted(hovers)[int(0.99 * len(hovers))] * 1000:.0f} ms")
