"""The analyzer witnesses in `k3lsp eval castle`: `--witnesses-only` scores real cppcheck and gcc -fanalyzer runs on
the small CASTLE-format dataset (tests/eval/castle_data.py) without any daemon, each and their union; the
`witnesses` matrix axis sends the alerts with each unit, and a scripted model's confirmation of one becomes a
finding that scores."""

from __future__ import annotations

import json

import pytest

from k3lsp.witnesses.analyze import find
from tests.eval import castle_data as data
from tests.support import kimi
from tests.support.batch import k3lsp
from tests.support.daemon import serving

NOBODY = "tcp://127.0.0.1:9"  # no daemon listens there: --witnesses-only never asks one


@pytest.fixture
def analyzers():
    missing = [n for n in ("cppcheck", "gcc") if find(n) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (docs/witnesses.md says how)")


def castle(tmp_path, *extra: str):
    dataset = data.write(tmp_path / "castle.json", data.dataset())
    done = k3lsp("eval", "castle", str(dataset), "--out", str(tmp_path / "out"), *extra, cache=tmp_path / "c",
                 cwd=tmp_path)  # fmt: skip
    path = tmp_path / "out" / "report.json"
    return done, json.loads(path.read_text()) if path.exists() else None


def by_test(configuration: dict) -> dict[str, dict]:
    return {t["id"]: t for t in configuration["tests"]}


def test_witnesses_only_scores_each_analyzer_and_their_union_with_no_daemon(analyzers, tmp_path):
    done, report = castle(tmp_path, "--witnesses-only=cppcheck,gcc", "--endpoint", NOBODY)
    assert done.returncode == 0, done.stderr
    cppcheck, gcc, union = report["configurations"]
    assert [c["name"] for c in report["configurations"]] == ["cppcheck alone", "gcc alone", "union of cppcheck, gcc"]
    assert cppcheck["analyzers"] == {"cppcheck": find("cppcheck").version} and cppcheck["daemon"] is None
    assert union["analyzers"] == cppcheck["analyzers"] | gcc["analyzers"] and union["errors"] == []
    # free(s); return s->id; both tools flag the use after free on its labelled line
    freed = data.CASES[2]
    for c in (cppcheck, gcc):
        test = by_test(c)[freed.id]
        assert test["tp"] == 1 and [f["line"] for f in test["findings"]] == [data.line_of(freed.code, freed.bug)]
    for test_id, u in by_test(union).items():  # the union finds what either found, and adds no match
        assert u["tp"] == max(by_test(c)[test_id]["tp"] for c in (cppcheck, gcc))
        assert u["fp"] <= by_test(cppcheck)[test_id]["fp"] + by_test(gcc)[test_id]["fp"]
    md = done.stdout
    row = f"| **k3lsp: cppcheck alone** | `{find('cppcheck').version}` |"
    assert row in md and "| Cppcheck | 2.13.0 | 18 | 100 | 5 | 132 |" in md


def test_witnesses_only_refuses_what_it_cannot_run(tmp_path):
    done, report = castle(tmp_path, "--witnesses-only=cppcheck,nope")
    assert done.returncode == 2 and "unknown witness 'nope'" in done.stderr and report is None
    done, _ = castle(tmp_path, "--witnesses-only", "--matrix", "effort=low,high")
    assert done.returncode == 2 and "no --matrix" in done.stderr


def test_the_witnesses_axis_sends_the_alerts_and_a_confirmed_one_scores(analyzers, tiny_model, tmp_path):
    confirm = ("triage_alert", {"id": "A1", "verdict": "confirmed", "reason": "s is read after free(s)"})
    script = [
        {"unit": "drop_session", "turns": [kimi.turn(confirm), kimi.turn(content="no findings")]},
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]
    with serving(tiny_model, script=script, args=["--max-tokens", "4000"]) as daemon:
        done, report = castle(tmp_path, "--matrix", "witnesses=off,cppcheck", "--endpoint", daemon.endpoint)
        shown = [json.dumps(s) for s in daemon.sessions("drop_session")]
    assert done.returncode == 0, done.stderr
    off, on = report["configurations"]
    assert (off["name"], on["name"]) == ("witnesses=off", "witnesses=cppcheck")
    assert on["analyzers"] == {"cppcheck": find("cppcheck").version} and off["analyzers"] == {}
    freed = data.CASES[2]
    assert (by_test(off)[freed.id]["tp"], by_test(on)[freed.id]["tp"]) == (0, 1)
    assert on["score"]["tp"] == 1 and on["summary"]["audited"] == off["summary"]["audited"]
    assert "A1: line 4, cppcheck" in shown[-1] and "cppcheck" not in shown[-2]  # the alert, shown with the unit
