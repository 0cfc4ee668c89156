"""The kconfig and unbuilt settings through the language server, against a real scripted `k3-backend`, on a small
kernel tree written by the test (Kconfig, Makefiles, an ``#ifdef``): a finding in code the configuration does not
build is a hint with the reason in its hover (``hint``), is not shown (``hide``) or shows as any other (``show``);
a workspace audit takes built files first, and with ``unbuilt: hide`` sends no unbuilt unit and says how many it
skipped and why."""

from __future__ import annotations

import asyncio
import functools
import os
import time

import pytest
from lsprotocol import types as lsp

from k3lsp.core.options import Options
from k3lsp.core.reachability import Reachability
from k3lsp.lsp.workspace import ordered_files
from tests.kbuild import trees
from tests.lsp import scripted
from tests.support.lsp import WAIT, editor

# demo.c with get_slot built only with CONFIG_SLOTS, which the .config leaves unset
GUARDED_C = scripted.DEMO_C.replace("static int get_slot", "#ifdef CONFIG_SLOTS\nstatic int get_slot") + "#endif\n"
GET_SLOT_LINE = scripted.GET_SLOT_LINE + 1
REASON = "line 13: `#ifdef CONFIG_SLOTS` (CONFIG_SLOTS is not set)"
TREE = trees.layout("drivers/", "CONFIG_DEMO=y\n# CONFIG_SLOTS is not set\n") | {
    "drivers/Makefile": "obj-y += demo.o\n",
    "drivers/demo.c": GUARDED_C,
}


@pytest.fixture
def kernel(tmp_path):
    return trees.write(tmp_path / "linux", TREE)


def severities(diagnostics: list[lsp.Diagnostic]) -> dict[int, lsp.DiagnosticSeverity]:
    return {d.range.start.line: d.severity for d in diagnostics}


async def saved(ed, count: int) -> tuple[str, list[lsp.Diagnostic]]:
    uri = ed.open("drivers/demo.c")
    ed.save(uri)
    await ed.wait_for_status(lambda c: c["audited"] == 2)  # both units audited, whatever is shown
    return uri, await ed.wait_diagnostics(uri, lambda ds: len(ds) == count)


async def test_hint_shows_unbuilt_findings_as_hints_with_the_reason_in_the_hover(daemon, kernel, tmp_path):
    settings = {"endpoint": daemon.endpoint, "kconfig": ".config"}  # unbuilt: hint, the default
    async with editor(kernel, settings=settings, cache_dir=tmp_path / "c") as ed:
        uri, diagnostics = await saved(ed, 2)
        assert severities(diagnostics) == {
            scripted.COPY_MSG_LINE: lsp.DiagnosticSeverity.Error,
            GET_SLOT_LINE: lsp.DiagnosticSeverity.Hint,
        }
        slot = next(d for d in diagnostics if d.range.start.line == GET_SLOT_LINE)
        assert list(slot.tags) == [lsp.DiagnosticTag.Unnecessary]
        at = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=slot.range.start)
        hover = (await asyncio.wait_for(ed.client.text_document_hover_async(at), WAIT)).contents.value
        assert "Not built in this configuration" in hover and "CONFIG\\_SLOTS is not set" in hover, hover
        copy = next(d for d in diagnostics if d.range.start.line == scripted.COPY_MSG_LINE)
        at = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=copy.range.start)
        assert "Not built" not in (await asyncio.wait_for(ed.client.text_document_hover_async(at), WAIT)).contents.value


async def test_hide_drops_unbuilt_findings_and_show_leaves_them_as_they_are(daemon, kernel, tmp_path):
    settings = {"endpoint": daemon.endpoint, "kconfig": ".config", "unbuilt": "hide"}
    async with editor(kernel, settings=settings, cache_dir=tmp_path / "c") as ed:
        _, diagnostics = await saved(ed, 1)  # on save the unit is audited all the same: hide is display only
        assert severities(diagnostics) == {scripted.COPY_MSG_LINE: lsp.DiagnosticSeverity.Error}
        assert (await ed.status())["silenced"]["unbuilt"] == 1  # hidden, and the status says how many
    settings["unbuilt"] = "show"
    async with editor(kernel, settings=settings, cache_dir=tmp_path / "c2") as ed:
        _, diagnostics = await saved(ed, 2)
        assert severities(diagnostics) == {
            scripted.COPY_MSG_LINE: lsp.DiagnosticSeverity.Error,
            GET_SLOT_LINE: lsp.DiagnosticSeverity.Warning,  # medium, as without a kconfig
        }
        assert all(d.tags is None for d in diagnostics)


async def test_a_workspace_audit_with_hide_sends_no_unbuilt_unit_and_says_what_it_skipped(daemon, kernel, tmp_path):
    (kernel / "drivers/other.c").write_text(scripted.DEMO_C.replace("copy_msg", "other_copy"))  # no rule: unknown
    settings = {"endpoint": daemon.endpoint, "kconfig": ".config", "unbuilt": "hide"}
    async with editor(kernel, settings=settings, cache_dir=tmp_path / "c") as ed:
        answer = await ed.command("k3lsp.auditWorkspace", timeout=4 * WAIT)
        status = await ed.status()
        infos = ed.shown(lsp.MessageType.Info)
    assert answer["files"] == 2
    assert status["counters"]["sent"] == 3  # copy_msg, and other.c's two (unknown: audited); get_slot never sent
    said = [m for m in infos if m.startswith("k3 workspace audit: kconfig .config: ")]
    assert said == [
        "k3 workspace audit: kconfig .config: 1 of 4 units not built, skipped (--only-built, unbuilt: hide): 1 in "
        f"drivers/demo.c ({REASON}); built-in 1, module 0, unknown 2"
    ], infos


def test_a_workspace_audit_takes_the_files_the_configuration_builds_first(kernel):
    (kernel / "drivers/Makefile").write_text("obj-y += demo.o\nobj-$(CONFIG_OFF) += off.o\n")
    for name, age in (("demo.c", 300), ("off.c", 0), ("other.c", 100)):  # off.c the newest, demo.c the oldest
        (kernel / "drivers" / name).write_text(scripted.DEMO_C)
        os.utime(kernel / "drivers" / name, (time.time() - age, time.time() - age))
    built = functools.partial(Reachability().file_rank, kconfig=".config")
    files = ordered_files(kernel, Options(), set(), built)
    assert [p.name for p in files] == ["demo.c", "other.c", "off.c"]  # built, unknown (no rule), not built
    assert [p.name for p in ordered_files(kernel, Options(), set())] == ["off.c", "other.c", "demo.c"]  # newest first


async def test_a_kconfig_that_cannot_be_read_is_said_once_and_the_file_shown_as_without_one(fake, kernel, tmp_path):
    async with editor(kernel, settings={"kconfig": "missing.config"}, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("drivers/demo.c")
        for _ in range(2):
            ed.save(uri)
            diagnostics = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
            await ed.wait_for_status(lambda c: c["audited"] + c["cached"] >= 2)
        await ed.status()  # a round trip: a message the saves caused came before
        said = [m for m in ed.shown(lsp.MessageType.Warning) if "missing.config" in m]
    assert said == [f"kconfig '{kernel / 'missing.config'}' cannot be read ([Errno 2] No such file or directory: "
                    f"'{kernel / 'missing.config'}'): give the path of a .config or a defconfig name"]  # fmt: skip
    assert severities(diagnostics)[GET_SLOT_LINE] == lsp.DiagnosticSeverity.Warning  # every state unknown
