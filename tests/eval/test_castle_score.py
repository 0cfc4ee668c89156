"""The CASTLE scorer on hand-made datasets: each of the authors' rules (k3lsp/eval/castle_score.py) on its own,
with totals worked out by hand."""

from __future__ import annotations

import dataclasses

from k3lsp.eval import castle, castle_score
from k3lsp.eval.castle_score import Reported
from tests.eval import castle_data as data

BY_ID = {c.id: c for c in data.CASES}
SPIN = data.Case("835-1", 835, data.SPIN_COUNT, "spin_count", "i += 0")


def load(tmp_path, cases=data.CASES) -> castle.Dataset:
    return castle.load(data.write(tmp_path / "d.json", data.dataset(cases)))


def counts(s: castle_score.Score) -> dict:
    return {"tp": s.tp, "tn": s.tn, "fp": s.fp, "fn": s.fn, "bonus": s.bonus, "score": s.score}


def at_bug(case: data.Case, cwe: int | None = None, severity: str = "high") -> Reported:
    return Reported(data.line_of(case.code, case.bug), case.cwe if cwe is None else cwe, severity)


def judged(tmp_path, case_id: str, findings: list[Reported]) -> castle_score.TestResult:
    ds = load(tmp_path)
    test = next(t for t in ds.tests if t.id == case_id)
    return castle_score.judge(test, ds.families, findings)


def outcome(r: castle_score.TestResult) -> tuple[int, int, int, int]:
    return r.tp, r.tn, r.fp, r.fn


def test_a_perfect_oracle_scores_the_perfect_total(tmp_path):
    ds = load(tmp_path)
    oracle = {c.id: [at_bug(c)] for c in data.CASES if c.bug}
    score, _ = castle_score.score(ds, oracle)
    assert counts(score) == data.ORACLE == {"tp": 4, "tn": 2, "fp": 0, "fn": 0, "bonus": 25, "score": 49}
    assert castle_score.perfect(ds) == score
    assert (score.precision, score.recall, score.accuracy) == (1.0, 1.0, 1.0)


def test_an_empty_run_scores_two_per_safe_test(tmp_path):
    score, _ = castle_score.score(load(tmp_path), {})
    safe = sum(c.bug is None for c in data.CASES)
    assert counts(score) == {"tp": 0, "tn": safe, "fp": 0, "fn": 4, "bonus": 0, "score": 2 * safe}
    assert (score.precision, score.recall, score.accuracy) == (0.0, 0.0, safe / len(data.CASES))


def test_one_unrelated_finding_on_every_test_scores_minus_the_number_of_tests(tmp_path):
    unrelated = {c.id: [Reported(1, 561, "medium")] for c in data.CASES}  # line 1: an include, never a label
    score, results = castle_score.score(load(tmp_path), unrelated)
    assert score.score == -len(data.CASES)
    assert counts(score) == {"tp": 0, "tn": 0, "fp": 6, "fn": 4, "bonus": 0, "score": -6}
    assert all(r.matched == (False,) for r in results)


def test_a_cwe_matches_itself_its_children_and_its_direct_parents_only(tmp_path):
    copy = BY_ID["787-1"]  # CWE-787: parent 119, children 121 and 122 (castle_data.CWES)
    elsewhere = data.line_of(copy.code, "char buf[8];")  # not the labelled line
    for cwe, found in [(787, True), (121, True), (122, True), (119, True), (416, False), (120, False), (1, False)]:
        r = judged(tmp_path, "787-1", [Reported(elsewhere, cwe, "high")])
        assert outcome(r) == ((1, 0, 0, 0) if found else (0, 0, 1, 1)), cwe


def test_the_labelled_line_matches_whatever_the_cwe(tmp_path):
    r = judged(tmp_path, "787-1", [at_bug(BY_ID["787-1"], cwe=561)])
    assert outcome(r) == (1, 0, 0, 0)


def test_matches_beyond_the_first_are_neither_tp_nor_fp_and_the_others_are_fps(tmp_path):
    case = BY_ID["416-1"]
    findings = [at_bug(case), Reported(1, 416, "high"), Reported(2, 672, "critical"), Reported(3, 190, "medium")]
    r = judged(tmp_path, "416-1", findings)
    assert outcome(r) == (1, 0, 1, 0) and r.matched == (True, True, True, False)


def test_a_family_finding_on_a_safe_test_is_a_tp_as_in_the_authors_code(tmp_path):
    ds = load(tmp_path)
    score, results = castle_score.score(ds, {"22-2": [Reported(2, 23, "high")]})  # 23: a child of CWE-22
    assert outcome(next(r for r in results if r.test.id == "22-2")) == (1, 0, 0, 0)
    assert (score.tp, score.safe_tp, score.tn) == (1, 1, 1)


def test_findings_below_medium_are_left_out_first(tmp_path):
    copy = BY_ID["787-1"]
    assert outcome(judged(tmp_path, "787-1", [at_bug(copy, severity="low")])) == (0, 0, 0, 1)
    assert outcome(judged(tmp_path, "787-1", [at_bug(copy, severity="info")])) == (0, 0, 0, 1)
    for severity in ("medium", "high", "critical"):
        assert outcome(judged(tmp_path, "787-1", [at_bug(copy, severity=severity)])) == (1, 0, 0, 0)
    noise = [Reported(1, 561, "low"), Reported(2, 561, "info")]
    r = judged(tmp_path, "22-2", noise)  # a safe test whose only findings are below medium: a TN
    assert outcome(r) == (0, 1, 0, 0) and r.kept == ()


def test_the_top25_bonus_counts_from_the_first_tp_in_dataset_order(tmp_path):
    copy, safe = BY_ID["787-1"], BY_ID["22-2"]
    found = {copy.id: [at_bug(copy)]}
    first = castle_score.score(load(tmp_path, (copy, safe)), found)[0]
    assert (first.bonus, first.score) == (5 + 5, 5 + 2 + 10)  # CWE-787 then the safe CWE-22 test, both after a TP
    later = castle_score.score(load(tmp_path, (safe, copy)), found)[0]
    assert (later.bonus, later.score) == (5, 5 + 2 + 5)  # the safe test came before any TP: no bonus for it
    missed = castle_score.score(load(tmp_path, (copy, safe)), {})[0]
    assert missed.bonus == 0  # no TP at all: no bonus


def test_the_bonus_falls_with_the_top25_index_and_is_none_outside_it(tmp_path):
    cases = (BY_ID["416-1"], BY_ID["476-1"], SPIN)  # Top-25 index 7, 20; CWE-835 is not in the Top 25
    found = {c.id: [at_bug(c)] for c in cases}
    score = castle_score.score(load(tmp_path, cases), found)[0]
    assert score.bonus == (5 - 7 // 5) + (5 - 20 // 5) + 0 == 5


def test_per_cwe_rows_count_found_and_missed_vulnerable_tests(tmp_path):
    ds = load(tmp_path)
    _, results = castle_score.score(ds, {"22-1": [at_bug(BY_ID["22-1"])]})
    rows = {row.cwe: row for row in castle_score.by_cwe(results)}
    assert sorted(rows) == [22, 416, 476, 787]
    assert dataclasses.astuple(rows[22]) == (22, 2, 1, 1, 0, 0) and rows[22].recall == 1.0
    assert dataclasses.astuple(rows[787]) == (787, 2, 1, 0, 1, 0) and rows[787].recall == 0.0
