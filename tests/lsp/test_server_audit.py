"""The language server against a real scripted `k3-backend`: save -> diagnostics, caching, incremental audits and
thinking efforts as the daemon sees them. The same logic per client profile, on the fake daemon without a
daemon: test_server_logic.py."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.lsp import WAIT, editor


@pytest.fixture
def root(tmp_path):
    return scripted.workspace(tmp_path)


async def test_save_publishes_findings_with_ranges_codes_and_trace(daemon, root, tmp_path):
    """End to end through the model's report_finding; each client profile, on the fake: test_server_logic.py."""
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        copy = scripted.demo_copy_diagnostic(diags)
        assert copy.code_description.href == "https://cwe.mitre.org/data/definitions/787.html"
        assert len(copy.data["fingerprint"]) == 32
        # The model's confidence and fix came through the engine too (hover formats, on the fake: test_server_clients)
        at = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=copy.range.start)
        hover = (await asyncio.wait_for(ed.client.text_document_hover_async(at), WAIT)).contents.value
        assert "confidence 90%" in hover and "min_t(int, n, sizeof(m->buf))" in hover, hover
        status = await ed.status()
        assert status["counters"]["sent"] == 2 and status["counters"]["audited"] == 2


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
    efforts = {
        name: [s["thinking_effort"] for s in daemon.sessions(f"effort_{name}")] for name in ("saved", "whole", "chosen")
    }
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


async def test_a_workspace_audit_estimates_its_time_at_the_daemons_measured_prefill_rate(daemon, root, tmp_path):
    """Issue 44: once the daemon has prefilled something, the cost a workspace audit states is at its own measured
    rate (its status: prefilled tokens over prefill seconds), not the stated ~300 tokens/s, and for the units'
    whole prompts at the mean the daemon prefilled an audit, not their code alone. A client that cannot be asked,
    in a folder with no narrower scope (no git, no kconfig, the open file at the top): nothing starts."""
    settings = {"endpoint": daemon.endpoint, "askAboveUnits": 1}
    async with editor(root, profile="emacs", settings=settings, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        report = await ed.command("k3lsp.auditWorkspace")
    (told,) = [m for m in ed.shown(lsp.MessageType.Warning) if m.startswith("k3 workspace audit:")]
    assert "tokens/s, the daemon's measured rate" in told and "Nothing was started" in told, told
    assert " tokens of prompt (" in told and " audits the daemon has prefilled): about " in told, told
    assert report["cancelled"] is True and report["files"] == 0
