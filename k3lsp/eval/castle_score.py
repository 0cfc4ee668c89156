"""The CASTLE score, computed the way the authors' evaluation code computes it (CASTLE-Source, ``charts.ipynb``:
``filter_findings``, ``validate_findings``, ``castle``), so that our number is the number their table prints.

Per test, in dataset order:

1. findings of a severity below medium are left out (the authors keep ``critical``, ``high``, ``medium`` and the
   levels of tools without severities; of ours, ``low`` and ``info`` go);
2. no finding left on a safe test: a TN;
3. a finding *matches* when its line is one of the test's ``lines``, or its CWE is the test's CWE, one of its
   children or one of its direct parents (the dataset's ``cwes`` map);
4. at least one match: one TP, however many match (the others are neither TP nor FP); this holds on a safe test
   too, where a finding of the test's CWE family counts as a TP (the authors' manual review overrode such
   findings by hand; the code does not, and neither do we: ``Score.safe_tp`` counts them so a reader can tell);
5. every finding that does not match is an FP; a vulnerable test without a match is also an FN.

Then score = 5·TP + 2·TN − FP + bonus, where the bonus adds ``5 − index // 5`` (index: the CWE's place in the
2024 CWE Top 25) for each test whose CWE is in the Top 25, provided at least one TP has been counted by then
(their code checks the running total, in dataset order). A perfect run on CASTLE-C250 scores 1250, a run with no
findings 200.

A finding's *line* is its first line in the program: what the authors' wrappers read from a tool's SARIF
(``region.startLine``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from k3lsp.eval.castle import CastleTest, Dataset

SCORING = {"tp": 5, "tn": 2, "fp": -1, "fn": 0}
TOPLIST_BONUS = 5
TOP_25_2024 = (79, 787, 89, 352, 22, 125, 78, 416, 862, 434, 94, 20, 77, 287, 269, 502, 200, 863, 918, 119,
               476, 798, 190, 400, 306)  # fmt: skip
KEPT_SEVERITIES = frozenset({"critical", "high", "medium"})


@dataclass(frozen=True)
class Reported:
    """A finding as the scorer reads it (the authors' report format: severity, line, CWE)."""

    line: int  # 1-based line of the program where the finding starts
    cwe: int
    severity: str


@dataclass(frozen=True)
class TestResult:
    """How one test came out: the findings the severity filter kept, which of them match, and the counts."""

    test: CastleTest
    kept: tuple[Reported, ...]
    matched: tuple[bool, ...]  # per kept finding
    tp: int
    tn: int
    fp: int
    fn: int


def judge(test: CastleTest, families: dict[int, frozenset[int]], findings: Iterable[Reported]) -> TestResult:
    """One test's outcome under the authors' rules (the module's steps 1 to 5)."""
    kept = tuple(f for f in findings if f.severity in KEPT_SEVERITIES)
    if not kept and not test.vulnerable:
        return TestResult(test, kept, (), tp=0, tn=1, fp=0, fn=0)
    family = families[test.cwe]
    matched = tuple(f.line in test.lines or f.cwe in family for f in kept)
    matches = sum(matched)
    fp = len(kept) - matches
    return TestResult(test, kept, matched, tp=int(matches > 0), tn=0, fp=fp, fn=int(matches == 0 and test.vulnerable))


@dataclass(frozen=True)
class Score:
    """The paper's columns for one run."""

    tp: int
    tn: int
    fp: int
    fn: int
    bonus: int
    safe_tp: int = 0  # TPs on tests labelled safe (step 4): counted, as the authors' code counts them

    @property
    def score(self) -> int:
        s = SCORING
        return self.tp * s["tp"] + self.tn * s["tn"] + self.fp * s["fp"] + self.fn * s["fn"] + self.bonus

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def accuracy(self) -> float:
        counted = self.tp + self.tn + self.fp + self.fn
        return (self.tp + self.tn) / counted if counted else 0.0


def total(results: Sequence[TestResult]) -> Score:
    """The run's score; ``results`` in dataset order (the bonus follows the running TP total)."""
    tp = tn = fp = fn = bonus = safe_tp = 0
    for r in results:
        tp, tn, fp, fn = tp + r.tp, tn + r.tn, fp + r.fp, fn + r.fn
        safe_tp += r.tp and not r.test.vulnerable
        if r.test.cwe in TOP_25_2024 and tp > 0:
            bonus += TOPLIST_BONUS - TOP_25_2024.index(r.test.cwe) // TOPLIST_BONUS
    return Score(tp, tn, fp, fn, bonus, safe_tp)


def score(dataset: Dataset, findings: Mapping[str, Sequence[Reported]]) -> tuple[Score, list[TestResult]]:
    """Score every test of the dataset on the findings reported per test id (a test missing: no findings)."""
    results = [judge(t, dataset.families, findings.get(t.id, [])) for t in dataset.tests]
    return total(results), results


def perfect(dataset: Dataset) -> Score:
    """What a perfect run scores on this dataset: one finding on a labelled line of each vulnerable test, none on
    the safe ones (1250 on CASTLE-C250)."""
    oracle = {t.id: [Reported((*t.lines, 1)[0], t.cwe, "high")] for t in dataset.tests if t.vulnerable}
    return score(dataset, oracle)[0]


@dataclass(frozen=True)
class CweRow:
    """One CWE's tests: how many were vulnerable, found (TP) and missed (FN)."""

    cwe: int
    tests: int
    vulnerable: int
    tp: int
    fn: int
    fp: int

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0


def by_cwe(results: Iterable[TestResult]) -> list[CweRow]:
    """Per-CWE TP and FN (the paper's chart of true positives per CWE), by CWE number."""
    rows: dict[int, list[int]] = {}
    for r in results:
        row = rows.setdefault(r.test.cwe, [0, 0, 0, 0, 0])
        for i, value in enumerate((1, r.test.vulnerable, r.tp, r.fn, r.fp)):
            row[i] += value
    return [CweRow(cwe, *counts) for cwe, counts in sorted(rows.items())]
