"""The language server against a real scripted `k3-backend`: save -> diagnostics, caching, incremental audits,
diagnostics following edits. Push (VS Code profile) and pull clients."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.lsp import WAIT, editor


@pytest.fixture
def root(tmp_path):
    return scripted.workspace(tmp_path)


def codes(diagnostics):
    return sorted((d.range.start.line, d.code) for d in diagnostics)


@pytest.mark.parametrize("profile", ["vscode", "neovim", "pull"])
async def test_save_publishes_findings_with_ranges_codes_and_trace(daemon, root, tmp_path, profile):
    async with editor(root, profile=profile, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        assert codes(diags) == [(scripted.COPY_MSG_LINE, "CWE-787"), (scripted.GET_SLOT_LINE, "CWE-129")]
        copy = next(d for d in diags if d.code == "CWE-787")
        line = scripted.DEMO_C.split("\n")[scripted.COPY_MSG_LINE]
        assert copy.range.start == lsp.Position(scripted.COPY_MSG_LINE, 1)  # after the tab
        assert copy.range.end == lsp.Position(scripted.COPY_MSG_LINE, len(line))
        assert copy.source == "k3-audit" and copy.severity == lsp.DiagnosticSeverity.Error
        assert copy.code_description.href == "https://cwe.mitre.org/data/definitions/787.html"
        assert [r.location.range.start.line for r in copy.related_information] == [6, 8]
        assert len(copy.data["fingerprint"]) == 32
        status = await ed.status()
        assert status["diagnostics"] == ("pull" if profile == "pull" else "push")
        assert status["counters"]["sent"] == 2 and status["counters"]["audited"] == 2


async def test_utf16_columns_even_when_the_client_offers_utf8_first(daemon, root, tmp_path):
    """Neovim offers ["utf-8", "utf-16", "utf-32"]; k3lsp counts in UTF-16, so it must negotiate UTF-16."""
    line = "\tmemcpy(m->buf, src, n); /* \u00fc\u00df \U0001f600 */"
    (root / "wide.c").write_text(scripted.DEMO_C.replace("\tmemcpy(m->buf, src, n);", line))
    async with editor(root, profile="neovim", settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        assert ed.capabilities.position_encoding == lsp.PositionEncodingKind.Utf16
        uri = ed.open("wide.c")
        ed.save(uri)
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        copy = next(d for d in diags if d.code == "CWE-787")
        assert copy.range.end == lsp.Position(scripted.COPY_MSG_LINE, len(line.encode("utf-16-le")) // 2)
        assert copy.range.end.character != len(line.encode("utf-8"))


async def test_second_save_is_served_from_cache_and_one_edited_function_is_reaudited(daemon, root, tmp_path):
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        first = await ed.command("k3lsp.auditFile", uri)
        assert first["units"] == 2 and first["findings"] == 2
        status = await ed.status()
        sent, daemon_requests = status["counters"]["sent"], status["backend"]["requests"]

        second = await ed.command("k3lsp.auditFile", uri)  # nothing changed
        status = await ed.status()
        assert second["findings"] == 2
        assert status["counters"]["sent"] == sent and status["counters"]["cached"] == 2
        assert status["backend"]["requests"] == daemon_requests  # the daemon's own count: nothing arrived

        # Edit the body of get_slot only: exactly one unit goes to the daemon again.
        ed.change(uri, lsp.Range(lsp.Position(14, 8), lsp.Position(14, 8)), " ")
        ed.save(uri)
        after = await ed.wait_for_status(lambda c: c["audited"] == 3)
        assert after["sent"] == sent + 1 and after["cached"] == 3
        assert len(await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)) == 2


async def test_trigger_open_audits_on_open_and_manual_only_on_command(daemon, root, tmp_path):
    settings = {"endpoint": daemon.endpoint, "trigger": "open"}
    async with editor(root, settings=settings, cache_dir=tmp_path / "c1") as ed:
        uri = ed.open("demo.c")
        assert len(await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)) == 2

    settings = {"endpoint": daemon.endpoint, "trigger": "manual"}
    async with editor(root, settings=settings, cache_dir=tmp_path / "c2") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        assert (await ed.status())["counters"]["units"] == 0  # handled in order: the save started nothing
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2


async def test_pull_reports_unchanged_until_the_findings_change(daemon, root, tmp_path):
    async with editor(root, profile="pull", settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        await ed.command("k3lsp.auditFile", uri)
        ident = lsp.TextDocumentIdentifier(uri=uri)
        full = await asyncio.wait_for(
            ed.client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(text_document=ident)), WAIT
        )
        assert full.kind == "full" and len(full.items) == 2
        again = lsp.DocumentDiagnosticParams(text_document=ident, previous_result_id=full.result_id)
        assert (await asyncio.wait_for(ed.client.text_document_diagnostic_async(again), WAIT)).kind == "unchanged"
        ed.change(uri, lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)), "\n")  # moves both findings
        moved = await asyncio.wait_for(ed.client.text_document_diagnostic_async(again), WAIT)
        assert moved.kind == "full" and sorted(d.range.start.line for d in moved.items) == [9, 15]


async def test_closing_a_document_clears_its_pushed_diagnostics(daemon, root, tmp_path):
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        await ed.command("k3lsp.auditFile", uri)
        assert len(await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)) == 2
        assert (await ed.status())["documents"] == 1
        ed.client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri)))
        assert await ed.wait_diagnostics(uri, lambda ds: not ds) == []
        assert (await ed.status())["documents"] == 0  # forgotten: a settings change no longer re-reads it


async def test_thinking_effort_is_low_on_save_high_for_the_workspace_unless_set(daemon, tmp_path):
    """The daemon records the effort each conversation ran at (its --trace-file): `auto` sends low for an audit
    on save and high for a workspace audit; a `thinkingEffort` setting applies to both."""
    root = tmp_path / "effort"
    root.mkdir()
    for name in ("saved", "whole", "chosen"):
        (root / f"{name}.c").write_text(f"static int effort_{name}(int a)\n{{\n\treturn a;\n}}\n")
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c1") as ed:
        uri = ed.open("saved.c")
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["audited"] == 1)
        (root / "saved.c").unlink()  # the workspace audit is about the others
        (root / "chosen.c").rename(root / "chosen.c.later")
        assert (await ed.command("k3lsp.auditWorkspace"))["files"] == 1
    (root / "chosen.c.later").rename(root / "chosen.c")
    settings = {"endpoint": daemon.endpoint, "thinkingEffort": "max"}
    async with editor(root, settings=settings, cache_dir=tmp_path / "c2") as ed:
        ed.save(ed.open("chosen.c"))
        await ed.wait_for_status(lambda c: c["audited"] == 1)
    efforts = {name: [s["thinking_effort"] for s in daemon.sessions(f"effort_{name}")]
               for name in ("saved", "whole", "chosen")}
    assert efforts == {"saved": ["low"], "whole": ["high"], "chosen": ["max"]}


async def test_a_cached_result_answers_only_audits_at_its_effort_or_below(daemon, tmp_path):
    """A result at low effort (a save) does not answer a workspace audit (high); the high one then answers the
    next save, and nothing more reaches the daemon."""
    root = tmp_path / "reuse"
    root.mkdir()
    (root / "reuse.c").write_text("static int effort_reuse(int a)\n{\n\treturn a;\n}\n")
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("reuse.c")
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["audited"] == 1)
        assert (await ed.command("k3lsp.auditWorkspace"))["files"] == 1
        await ed.wait_for_status(lambda c: c["audited"] == 2)
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["cached"] >= 1)
    assert [s["thinking_effort"] for s in daemon.sessions("effort_reuse")] == ["low", "high"]
