"""The language server's logic through a real LSP client, its daemons the fake (tests/support/fake_daemon.py):
diagnostics per client profile, triggers, the cache between saves, refusals and cut-short audits, cancelling,
a daemon that goes down and comes back, a refused key, status notifications and workspace audits. No daemon
and no mlx: the ``logic`` tier (CONTRIBUTING.md)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from lsprotocol import types as lsp

from k3lsp.core.client import DaemonClient
from k3lsp.core.connection import Transport
from tests.lsp import scripted
from tests.support.fake_daemon import FakeDaemon
from tests.support.lsp import WAIT, editor

pytestmark = pytest.mark.logic


@pytest.fixture
def root(tmp_path):
    return scripted.workspace(tmp_path)


def calls(status: dict, op: str) -> list[dict]:
    return [c for c in status["backend"]["calls"] if c["op"] == op]


def warnings(ed) -> list[str]:
    return [m.message for m in ed.client.messages if m.type == lsp.MessageType.Warning]


def _shape(function) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("member", [m for m in vars(Transport) if not m.startswith("_")])
def test_the_fake_daemon_has_what_a_connection_asks_of_the_client(member):
    """The fake cannot drift from the real client: each method of ``Transport`` has the same parameters (names,
    kinds, defaults) and is the same kind of callable (coroutine, async generator) in both."""
    wanted = getattr(Transport, member)
    fake, real = getattr(FakeDaemon, member), getattr(DaemonClient, member)
    assert _shape(fake) == _shape(real) == _shape(wanted), member
    for kind in (inspect.iscoroutinefunction, inspect.isasyncgenfunction):
        assert kind(fake) == kind(real), (member, kind.__name__)


@pytest.mark.parametrize("profile", ["vscode", "neovim", "pull"])
async def test_save_publishes_findings_with_ranges_codes_and_trace(fake, root, tmp_path, profile):
    async with editor(root, profile=profile, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        status = await ed.status()
    scripted.demo_copy_diagnostic(diags)
    assert status["diagnostics"] == ("pull" if profile == "pull" else "push")
    audits = calls(status, "audit")
    assert sorted(a["unit"] for a in audits) == ["copy_msg", "get_slot"] and {a["path"] for a in audits} == {"demo.c"}
    assert {(a["priority"], a["effort"], a["fresh"]) for a in audits} == {("interactive", "low", False)}


async def test_utf16_columns_even_when_the_client_offers_utf8_first(fake, root, tmp_path):
    """Neovim offers ["utf-8", "utf-16", "utf-32"]; k3lsp counts in UTF-16, so it must negotiate UTF-16."""
    line = "\tmemcpy(m->buf, src, n); /* \u00fc\u00df \U0001f600 */"
    (root / "wide.c").write_text(scripted.DEMO_C.replace("\tmemcpy(m->buf, src, n);", line))
    async with editor(root, profile="neovim", fake=fake, cache_dir=tmp_path / "c") as ed:
        assert ed.capabilities.position_encoding == lsp.PositionEncodingKind.Utf16
        uri = ed.open("wide.c")
        ed.save(uri)
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
    copy = next(d for d in diags if d.code == "CWE-787")
    assert copy.range.end == lsp.Position(scripted.COPY_MSG_LINE, len(line.encode("utf-16-le")) // 2)


async def test_an_unchanged_save_is_answered_by_the_cache_and_an_edit_sends_only_its_function(fake, root, tmp_path):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2  # nothing changed
        ed.change(uri, lsp.Range(lsp.Position(14, 8), lsp.Position(14, 8)), " ")  # inside get_slot
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["audited"] == 3)
        status = await ed.status()
        assert len(await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)) == 2
    units = [a["unit"] for a in calls(status, "audit")]
    assert sorted(units[:2]) == ["copy_msg", "get_slot"] and units[2:] == ["get_slot"]
    assert status["counters"]["cached"] == 3  # both on the second audit, copy_msg on the third


async def test_trigger_open_audits_on_open_and_manual_only_on_command(fake, root, tmp_path):
    async with editor(root, settings={"trigger": "open"}, fake=fake, cache_dir=tmp_path / "c1") as ed:
        uri = ed.open("demo.c")
        assert len(await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)) == 2
    async with editor(root, settings={"trigger": "manual"}, fake=fake, cache_dir=tmp_path / "c2") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        assert (await ed.status())["counters"]["units"] == 0  # handled in order: the save started nothing
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2


async def test_pull_reports_unchanged_until_the_findings_change(fake, root, tmp_path):
    async with editor(root, profile="pull", fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        await ed.command("k3lsp.auditFile", uri)
        ident = lsp.TextDocumentIdentifier(uri=uri)
        pull = ed.client.text_document_diagnostic_async
        full = await asyncio.wait_for(pull(lsp.DocumentDiagnosticParams(text_document=ident)), WAIT)
        assert full.kind == "full" and len(full.items) == 2
        again = lsp.DocumentDiagnosticParams(text_document=ident, previous_result_id=full.result_id)
        assert (await asyncio.wait_for(pull(again), WAIT)).kind == "unchanged"
        ed.change(uri, lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)), "\n")  # moves both findings
        moved = await asyncio.wait_for(pull(again), WAIT)
    assert moved.kind == "full" and sorted(d.range.start.line for d in moved.items) == [9, 15]


async def test_closing_a_document_clears_its_pushed_diagnostics(fake, root, tmp_path):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        await ed.command("k3lsp.auditFile", uri)
        assert len(await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)) == 2
        ed.client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri)))
        assert await ed.wait_diagnostics(uri, lambda ds: not ds) == []
        assert (await ed.status())["documents"] == 0


async def test_a_refused_unit_gets_a_note_and_its_neighbour_its_findings(fake, root, tmp_path):
    fake.write(scripted.FAKE | {"units": scripted.FAKE["units"] | {"get_slot": {"refusal": "too long: 9000 tokens"}}})
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
    note = next(d for d in diags if d.code != "CWE-787")
    assert "too long: 9000 tokens" in note.message and note.range.start.line == 12  # get_slot's first line


async def test_a_cut_short_audit_is_shown_with_a_warning_and_audited_again(fake, root, tmp_path):
    cut = scripted.FAKE["units"]["copy_msg"] | {"cut_short": "deadline"}
    fake.write(scripted.FAKE | {"units": scripted.FAKE["units"] | {"copy_msg": cut}})
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        assert summary["incomplete"] == 1 and summary["findings"] == 2  # what it found is shown
        assert any("cut short for copy_msg (deadline)" in w for w in warnings(ed)), warnings(ed)
        fake.write(scripted.FAKE)
        assert (await ed.command("k3lsp.auditFile", uri))["incomplete"] == 0
        status = await ed.status()
    units = [a["unit"] for a in calls(status, "audit")]
    assert sorted(units[:2]) == ["copy_msg", "get_slot"] and units[2:] == ["copy_msg"]


async def test_a_newer_save_cancels_the_audit_of_the_older_version(fake, root, tmp_path):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("slow.c")
        ed.save(uri)  # slow_unit: held until cancelled
        await ed.wait_for_status(lambda c: c["sent"] == 1)
        ed.change(uri, lsp.Range(lsp.Position(0, 11), lsp.Position(0, 15)), "fast")  # slow_unit -> fast_unit
        ed.save(uri)
        counters = await ed.wait_for_status(lambda c: c["audited"] == 1)
        state = (await ed.status())["state"]
    assert counters["cancelled"] == 1 and counters["sent"] == 2
    assert state["running"] == 0


@pytest.mark.parametrize("profile", ["neovim", "pull"])
async def test_cancelling_the_progress_cancels_the_audit(fake, root, tmp_path, profile):
    fake.write(
        scripted.FAKE
        | {"units": {"slow_unit": {"hold": True, "progress": [{"stage": "prefill", "tokens": 512, "total": 1399}]}}}
    )
    async with editor(root, profile=profile, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("slow.c")
        ed.save(uri)
        token = await ed.wait_for(lambda: ed.progress_token("k3 audit slow.c"))
        reports = ed.client.progress_reports[token]
        await ed.wait_for(lambda: len(reports) > 1)
        assert reports[0].cancellable and reports[0].message == "0/1"
        assert reports[1].message == "slow_unit: prefill 512/1,399 tokens"  # the daemon's progress, described
        ed.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
        counters = await ed.wait_for_status(lambda c: c["cancelled"] == 1)
        await ed.wait_for(lambda: isinstance(reports[-1], lsp.WorkDoneProgressEnd))
    assert counters["audited"] == 0


async def test_a_daemon_that_goes_down_keeps_cached_findings_and_one_warning_then_comes_back(fake, root, tmp_path):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
        fake.write(scripted.FAKE | {"state": "down"})
        ed.change(uri, lsp.Range(lsp.Position(14, 8), lsp.Position(14, 8)), " ")  # get_slot needs the daemon
        summary = await ed.command("k3lsp.auditFile", uri)
        assert "not reachable" in summary["error"]
        assert [d.code for d in await ed.diagnostics(uri)] == ["CWE-787"]  # copy_msg's, from the cache
        assert len(warnings(ed)) == 1 and "cached findings" in warnings(ed)[0]
        assert ed.status_notes[-1]["state"] == "down"
        fake.write(scripted.FAKE)
        summary = await ed.command("k3lsp.auditFile", uri)
        assert summary["error"] is None and summary["findings"] == 2
        assert ed.status_notes[-1]["state"] == "connected"
        assert any("is back" in m.message for m in ed.client.messages)


async def test_a_daemon_lost_mid_audit_ends_it_with_the_error_and_keeps_what_was_done(fake, root, tmp_path):
    fake.write(scripted.FAKE | {"units": scripted.FAKE["units"] | {"get_slot": {"fail": "down"}}})
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        diags = await ed.diagnostics(uri)
    assert summary["done"] == 1 and "not reachable" in summary["error"]  # asked again: still gone
    assert [d.code for d in diags] == ["CWE-787"]
    (warning,) = warnings(ed)  # one, however often it was asked again
    assert "stopped answering" in warning and "cached findings" in warning


async def test_a_refused_key_is_one_clear_message_and_a_restart_with_the_right_one_recovers(fake, root, tmp_path):
    fake.write(scripted.FAKE | {"state": "unauthorized"})
    settings = {"clientKey": str(tmp_path / "bad.key_secret")}
    async with editor(root, settings=settings, configuration=settings, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert "unauthorized" in (await ed.command("k3lsp.auditFile", uri))["error"]
        assert ed.status_notes[-1]["state"] == "unauthorized"
        assert len(warnings(ed)) == 1
    fake.write(scripted.FAKE)
    settings = {"clientKey": str(tmp_path / "good.key_secret")}  # the editors restart the server on that change
    async with editor(root, settings=settings, fake=fake, cache_dir=tmp_path / "c") as ed:
        summary = await ed.command("k3lsp.auditFile", ed.open("demo.c"))
    assert summary["error"] is None and summary["findings"] == 2


async def test_status_notifications_say_what_is_true_and_only_changes(fake, root, tmp_path):
    async with editor(root, settings={"endpoint": "tcp://127.0.0.1:9"}, fake=fake, cache_dir=tmp_path / "c") as ed:
        await ed.wait_for(lambda: ed.status_notes)
        ed.open("demo.c")  # the cache lookup contacts the backend
        await ed.wait_for(lambda: ed.status_notes[-1]["state"] == "connected")
        await ed.command("k3lsp.auditFile", ed.uri("demo.c"))
        states = [n["state"] for n in ed.status_notes]
    first = ed.status_notes[0]
    assert "not connected yet" in first["message"] and "tcp://127.0.0.1:9" in first["message"], first
    assert states[:3] == ["disconnected", "connecting", "connected"], states
    assert all(a != b for a, b in zip(ed.status_notes, ed.status_notes[1:], strict=False)), ed.status_notes


async def test_explain_that_fails_keeps_the_reasoning_in_its_message(fake, root, tmp_path):
    fake.write(scripted.FAKE | {"explain": {"error": "the model wandered off"}})
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        await ed.command("k3lsp.auditFile", uri)
        fingerprint = next(d for d in await ed.diagnostics(uri) if d.code == "CWE-787").data["fingerprint"]
        assert await ed.command("k3lsp.explain", uri, fingerprint) is None
        errors = [m.message for m in ed.client.messages if m.type == lsp.MessageType.Error]
    assert len(errors) == 1 and "the model wandered off" in errors[0] and scripted.COPY_WHY in errors[0]


async def test_workspace_audit_honours_the_settings_at_background_priority(fake, root, tmp_path):
    (root / "sub").mkdir()
    (root / "sub" / "extra.c").write_text("static int extra(void)\n{\n\treturn 1;\n}\n")
    (root / "sub" / "extra.h").write_text("int extra_h(void);\n")  # not included below
    (root / "sub" / "latin1.c").write_bytes(b"/* caf\xe9 */\nstatic int cafe(void)\n{\n\treturn 2;\n}\n")
    (root / "big.c").write_text("static int big(void)\n{\n" + "\t;\n" * 2000 + "}\n")  # over maxFileBytes
    settings = {
        "include": ["**/*.c"],
        "exclude": ["slow.c"],
        "maxFileBytes": 2000,
        "thinkingEffort": "max",
        "trigger": "sometimes",
        "colour": "blue",
    }  # the last two: reported, ignored
    async with editor(root, settings=settings, fake=fake, cache_dir=tmp_path / "c") as ed:

        def errors():
            return [m.message for m in ed.client.messages if m.type == lsp.MessageType.Error]

        await ed.wait_for(errors)
        (told,) = errors()  # both in one message
        assert "'sometimes'" in told and "'colour'" in told, told
        report = await ed.command("k3lsp.auditWorkspace")
        assert report == {
            "files": 4,
            "error": None,
            "left_out": 0,
            "cancelled": False,
        }  # demo, leaky, sub/extra, sub/latin1
        pushed = await ed.wait_diagnostics(ed.uri("demo.c"), lambda ds: len(ds) == 2)  # never opened
        status = await ed.status()
    assert sorted(d.code for d in pushed) == ["CWE-129", "CWE-787"]
    audits = calls(status, "audit")
    assert sorted({a["path"] for a in audits}) == ["demo.c", "leaky.c", "sub/extra.c", "sub/latin1.c"]
    assert {(a["priority"], a["effort"]) for a in audits} == {("background", "max")}
    assert ed.progress_token("k3 audit workspace") is not None
