"""Witnesses in the editor, through the real language server: cppcheck's alerts are shown at once as cppcheck's,
with no daemon at all; with a real daemon (scripted turns through the real engine) the model triages them and
refutes its own findings, and what the editor shows follows its verdicts."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from k3lsp.witnesses.analyze import find
from tests.support import kimi
from tests.support.daemon import serving
from tests.support.lsp import editor

SOURCE = """#include <stdlib.h>
int f(void)
{
\tchar buf[8];
\tchar *p = malloc(16);
\tbuf[9] = 0;
\tfree(p);
\tfree(p);
\treturn buf[0];
}
"""
OVERFLOW_LINE, DOUBLE_FREE_LINE = 5, 7  # 0-based file lines of cppcheck's two alerts (A1, A2 for the model)

pytestmark = pytest.mark.skipif(find("cppcheck") is None, reason="cppcheck is not installed: apt-get install cppcheck")


def workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "bug.c").write_text(SOURCE)
    return root


def lines_of(diagnostics: list[lsp.Diagnostic], source: str) -> list[int]:
    return sorted(d.range.start.line for d in diagnostics if d.source == source)


async def test_alerts_show_at_once_as_the_tools_with_no_daemon(tmp_path):
    settings = {"witnesses": ["cppcheck"], "endpoint": f"ipc://{tmp_path}/nobody.sock"}
    async with editor(workspace(tmp_path), settings=settings, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("bug.c")
        ed.save(uri)
        shown = await ed.wait_diagnostics(uri, lambda ds: len(lines_of(ds, "cppcheck")) == 2)
        status = await ed.status()
    assert lines_of(shown, "cppcheck") == [OVERFLOW_LINE, DOUBLE_FREE_LINE]
    double_free = next(d for d in shown if d.code == "doubleFree")
    assert double_free.severity == lsp.DiagnosticSeverity.Warning and "not triaged by the model" in double_free.message
    assert status["witnesses"]["cppcheck"].startswith("Cppcheck") and status["witnesses"]["gcc"].startswith("off")


def script() -> list[dict]:
    own = kimi.finding(title="Double free of p", cwe=415, start_line=7, end_line=7)  # the line of A2 in the unit
    noise = kimi.finding(title="Unchecked size", cwe=190, severity="medium", start_line=4, end_line=4)
    audit = kimi.turn(
        ("triage_alert", {"id": "A1", "verdict": "refuted", "reason": "buf is written inside its bounds"}),
        ("triage_alert", {"id": "A2", "verdict": "confirmed", "reason": "p is freed twice"}),
        ("report_finding", own),
        ("report_finding", noise),
    )
    refutation = kimi.turn(
        ("verdict", {"finding": 1, "verdict": "confirmed", "reason": "nothing resets p"}),
        ("verdict", {"finding": 2, "verdict": "refuted", "reason": "16 is a constant"}),
    )
    return [{"unit": "f", "turns": [audit, refutation]}]


async def test_the_models_verdicts_hide_the_refuted_and_merge_the_confirmed(tiny_model, tmp_path):
    root = workspace(tmp_path)
    with serving(tiny_model, script=script(), args=["--max-tokens", "4000"]) as daemon:
        settings = {"endpoint": daemon.endpoint, "witnesses": ["cppcheck"], "refute": True}
        async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:
            uri = ed.open("bug.c")
            ed.save(uri)
            await ed.wait_for_status(lambda c: c["audited"] == 1)
            shown = await ed.wait_diagnostics(uri, lambda ds: not lines_of(ds, "cppcheck"))
            status = await ed.status()
            hover = await ed.client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(DOUBLE_FREE_LINE, 2))
            )
        (session,) = daemon.sessions("f")
    (merged,) = shown  # the refuted alert and the refuted finding are hidden, the confirmed alert merged
    assert merged.source == "k3-audit" and merged.code == "CWE-415" and merged.range.start.line == DOUBLE_FREE_LINE
    assert "also cppcheck doubleFree" in merged.message and "confirmed by the model" in merged.message
    assert status["silenced"]["refuted"] == 2
    assert "Analyzer:** cppcheck doubleFree" in hover.contents.value
    assert "A2: line 7, cppcheck doubleFree (CWE-415)" in session["messages"][-4]["content"]


async def test_alerts_naming_a_place_outside_are_left_out_and_the_editor_is_told_once(tmp_path):
    """A source including a file beside the workspace: sparse's alert naming it is left out (issue 38, 4), and
    the person is told how many were, once for the file however often it is saved."""
    if find("sparse") is None:
        pytest.skip("sparse is not installed: apt-get install sparse")
    root = workspace(tmp_path)
    (root / "bug.c").write_text(f'#include "{tmp_path}/beside/secret.h"\n' + SOURCE)
    settings = {"witnesses": ["sparse"], "endpoint": f"ipc://{tmp_path}/nobody.sock"}
    async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("bug.c")
        for _ in range(2):
            ed.save(uri)
            await ed.wait_for(lambda: [m for m in ed.shown(lsp.MessageType.Warning) if "left out" in m])
        shown = await ed.wait_diagnostics(uri, lambda ds: True)
    told = [m for m in ed.shown(lsp.MessageType.Warning) if "left out" in m]
    assert len(told) == 1 and "outside the workspace" in told[0] and "bug.c" in told[0], told
    assert not [d for d in shown if "beside" in d.message], shown
