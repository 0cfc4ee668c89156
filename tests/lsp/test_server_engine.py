"""What the engine's limits and progress look like in the editor, through a real LSP client and a real scripted
`k3-backend` that reads at most 3000 prompt tokens: prefill progress in the work-done bar; a function too long
to audit is shown once on its function and never sent again; `k3lsp audit` reports it."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from k3lsp.cli import batch
from k3lsp.core.options import Options
from k3lsp.wire.cache import ResultCache
from tests.lsp import scripted
from tests.support import kimi
from tests.support.daemon import serving
from tests.support.lsp import editor

LIMIT = 3000  # prompt tokens: the demo's functions fit (~1.4k with the tiny tokenizer), HUGE does not
# copy_msg's reasoning: about 700 tokens to decode, so its decode outlasts the bar's pacing (a report a
# second) on any machine, which a decode of a hundred tokens did only on a loaded one
LONG_WHY = scripted.COPY_WHY + " " + " ".join(f"step {i}" for i in range(100))
BODY = "".join(f"\tv[{i}] = v[{i + 1}] * {i};\n" for i in range(300))
HUGE = f"static int huge(int *v)\n{{\n{BODY}\treturn 0;\n}}\n"


@pytest.fixture(scope="module")
def limited(tiny_model):
    args = [*scripted.DAEMON_ARGS, "--max-prompt-tokens", str(LIMIT)]
    copy = kimi.turn(("report_finding", scripted.COPY_FINDING), reasoning=LONG_WHY)
    with serving(tiny_model, script=[{"unit": "copy_msg", "turns": [copy]}, *scripted.SCRIPT], args=args) as d:
        yield d


@pytest.fixture
def root(tmp_path):
    root = scripted.workspace(tmp_path)
    (root / "big.c").write_text(scripted.DEMO_C + "\n" + HUGE)
    return root


def reports(ed) -> list[str]:
    return [
        v.message or ""
        for vs in ed.client.progress_reports.values()
        for v in vs
        if isinstance(v, lsp.WorkDoneProgressReport)
    ]


async def test_the_daemons_token_progress_reaches_the_editor(limited, root, tmp_path):
    """The daemon's progress (tokens read, tokens generated) shows in the editor's bar, per unit. The bar is
    paced (``k3lsp.lsp.progress.REPORT_SECONDS``): a prefill shorter than that, as the tiny model's are, may be passed
    over for the decode that follows, so what must show is the decode's count; the prefill's way through the
    same core is held by the batch test below, whose progress is not paced."""
    async with editor(root, settings={"endpoint": limited.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        counted = [m for m in reports(ed) if m.split(":")[0] in ("copy_msg", "get_slot") and m.endswith(" tokens")]
        assert counted, reports(ed)
        done, total = counted[-1].rsplit(" ", 2)[1].replace(",", "").split("/")
        assert 0 < int(done) <= int(total)
        assert any(": decode " in m for m in counted), counted


async def test_a_function_too_long_to_audit_is_shown_once_and_never_sent_again(limited, root, tmp_path):
    async with editor(root, settings={"endpoint": limited.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("big.c")
        ed.save(uri)
        huge_line = scripted.DEMO_C.count("\n") + 1
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 3)
        (note,) = [d for d in diags if d.code == "too-long"]
        assert note.range.start.line == huge_line and note.severity == lsp.DiagnosticSeverity.Information
        assert note.message.startswith("Too long to audit: the prompt has ") and f"at most {LIMIT}" in note.message
        counters = (await ed.status())["counters"]
        assert (counters["sent"], counters["refused"], counters["retries"]) == (3, 1, 0)

        ed.save(uri)  # nothing changed: the refusal is remembered like a result
        await ed.wait_for_status(lambda c: c["units"] == 6)
        assert (await ed.command("k3lsp.reauditFunction", uri, huge_line + 2))["units"] == 1  # asked for it
        counters = (await ed.status())["counters"]
        assert counters["sent"] == 3 and counters["refused"] == 1
        diags = await ed.diagnostics(uri)
        assert [d.code for d in diags].count("too-long") == 1


async def test_k3lsp_audit_reports_a_function_too_long_to_audit_and_shows_prefill_progress(limited, root, tmp_path):
    notes: list[str] = []
    report = await batch.audit_paths(
        [root / "big.c"],
        Options(endpoint=limited.endpoint),
        ResultCache(tmp_path / "r.sqlite3"),
        jobs=2,
        on_progress=lambda done, total, note: notes.append(note),
    )
    assert any(n.startswith("copy_msg: prefill ") for n in notes) and any(": decode " in n for n in notes)
    (error,) = report.errors
    assert error.startswith("big.c: huge: too long to audit: the prompt has ") and report.exit_status() == 2
    assert (report.counters.sent, report.counters.audited, report.counters.refused) == (3, 2, 1)
    assert len(report.findings) == 2
