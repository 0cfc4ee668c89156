"""Hover, each code action and diagnostics following edits, through a real server on the fake daemon (the answers
of tests/lsp/scripted.py without a daemon)."""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.edits import apply_edits
from tests.support.lsp import WAIT, editor


@pytest.fixture
async def ed(fake, tmp_path):
    root = scripted.workspace(tmp_path)
    async with editor(root, fake=fake, cache_dir=tmp_path / "cache") as ed:
        uri = ed.open("demo.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        assert summary["findings"] == 2
        yield ed


def at(line: int, character: int = 2) -> lsp.Position:
    return lsp.Position(line, character)


async def actions_at(ed, uri: str, line: int) -> list:
    params = lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        range=lsp.Range(at(line), at(line)),
        context=lsp.CodeActionContext(
            diagnostics=[d for d in ed.client.diagnostics[uri] if d.range.start.line == line]
        ),
    )
    return list(await asyncio.wait_for(ed.client.text_document_code_action_async(params), WAIT) or [])


def by_title(items: list, prefix: str):
    return next(item for item in items if item.title.startswith(prefix))


async def test_hover_shows_title_cwe_severity_trace_and_fix(ed):
    uri = ed.uri("demo.c")
    params = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=at(scripted.COPY_MSG_LINE, 5))
    hover = await asyncio.wait_for(ed.client.text_document_hover_async(params), WAIT)
    text = hover.contents.value
    assert "memcpy overflows buf" in text
    assert "[CWE-787](https://cwe.mitre.org/data/definitions/787.html)" in text
    assert "severity **high**" in text and "confidence 90%" in text
    assert "line 9: copied without a bound" in text  # trace step, 1-based file line
    assert "min\\_t" not in text and "min_t(int, n, sizeof(m->buf))" in text  # the fix, verbatim in a code block
    assert "**Why this was flagged:** src and n both come from the caller\\; buf holds 16 bytes" in text
    nothing = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=at(0))
    assert await asyncio.wait_for(ed.client.text_document_hover_async(nothing), WAIT) is None


async def test_apply_fix_and_suppress_on_line_edit_the_right_text(ed):
    uri = ed.uri("demo.c")
    items = await actions_at(ed, uri, scripted.COPY_MSG_LINE)
    fix = by_title(items, "Apply suggested fix")
    assert fix.kind == lsp.CodeActionKind.QuickFix and fix.is_preferred
    fixed = apply_edits(scripted.DEMO_C, fix.edit.changes[uri]).split("\n")
    assert fixed[scripted.COPY_MSG_LINE] == "\tmemcpy(m->buf, src, min_t(int, n, sizeof(m->buf)));"
    assert fixed[: scripted.COPY_MSG_LINE] == scripted.DEMO_C.split("\n")[: scripted.COPY_MSG_LINE]

    silence = by_title(items, "Suppress CWE-787 on this line")
    silenced = apply_edits(scripted.DEMO_C, silence.edit.changes[uri])
    assert silenced.split("\n")[scripted.COPY_MSG_LINE] == "\t/* k3-audit: ignore CWE-787 */"

    # The comment is honoured: after the edit and a save, that finding is gone and the other stays.
    ed.change(uri, silence.edit.changes[uri][0].range, silence.edit.changes[uri][0].new_text)
    ed.save(uri)
    diags = await ed.wait_diagnostics(uri, lambda ds: [d.code for d in ds] == ["CWE-129"])
    assert diags[0].range.start.line == scripted.GET_SLOT_LINE + 1  # moved down by the comment line


async def test_suppress_in_baseline_writes_the_file_and_hides_the_finding(ed):
    uri = ed.uri("demo.c")
    items = await actions_at(ed, uri, scripted.GET_SLOT_LINE)
    command = by_title(items, "Suppress this CWE-129 finding in the workspace baseline")
    assert await ed.command(command.command.command, *command.command.arguments) is True
    baseline = json.loads((ed.root / ".k3audit-baseline.json").read_text())
    assert [(f["cwe"], f["path"]) for f in baseline["findings"]] == [(129, "demo.c")]
    diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 1)
    assert diags[0].code == "CWE-787"


async def test_reaudit_function_sends_only_that_unit_again(ed):
    uri = ed.uri("demo.c")
    before = (await ed.status())["counters"]
    command = by_title(await actions_at(ed, uri, scripted.GET_SLOT_LINE), "Re-audit get_slot")
    summary = await ed.command(command.command.command, *command.command.arguments)
    status = await ed.status()
    after = status["counters"]
    assert summary["units"] == 1
    assert after["sent"] == before["sent"] + 1 and after["cached"] == before["cached"]
    audit = status["backend"]["calls"][-1]  # past the cache (nothing more cached), past the daemon's store (fresh)
    assert audit["op"] == "audit" and audit["unit"] == "get_slot" and audit["fresh"] is True


async def test_explain_streams_the_backend_answer_with_progress(ed):
    uri = ed.uri("demo.c")
    command = by_title(await actions_at(ed, uri, scripted.COPY_MSG_LINE), "Explain this CWE-787")
    answer = await ed.command(command.command.command, *command.command.arguments)
    # The reasoning that came with the finding leads; then the model's answer, its pieces joined.
    assert answer == f"Why it was flagged: {scripted.COPY_WHY}\n\nn is copied without a bound."
    assert any(answer[:40] in m.message for m in ed.client.messages)  # shown to the user
    assert ed.progress_token("Explaining CWE-787") is not None


async def test_diagnostics_shift_with_lines_inserted_above_and_drop_when_their_function_changes(ed):
    uri = ed.uri("demo.c")
    ed.change(uri, lsp.Range(at(1, 0), at(1, 0)), "/* one */\n/* two */\n")  # above both functions
    diags = await ed.wait_diagnostics(uri, lambda ds: min(d.range.start.line for d in ds) == scripted.COPY_MSG_LINE + 2)
    moved = [(scripted.COPY_MSG_LINE + 2, "CWE-787"), (scripted.GET_SLOT_LINE + 2, "CWE-129")]
    assert scripted.lines_and_codes(diags) == moved
    assert all(d.range.start.character == 1 for d in diags)
    copy = next(d for d in diags if d.code == "CWE-787")
    assert [r.location.range.start.line for r in copy.related_information] == [8, 10]

    # Typing inside copy_msg drops its finding (it may no longer hold); get_slot's stays where it is.
    ed.change(uri, lsp.Range(at(scripted.COPY_MSG_LINE + 2, 1), at(scripted.COPY_MSG_LINE + 2, 1)), "x")
    diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 1)
    assert scripted.lines_and_codes(diags) == [(scripted.GET_SLOT_LINE + 2, "CWE-129")]
    hover = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=at(scripted.GET_SLOT_LINE + 2))
    assert (
        "unchecked index" in (await asyncio.wait_for(ed.client.text_document_hover_async(hover), WAIT)).contents.value
    )
