"""CASTLE through the audit core: each program written out under its blind name, split into units like any C file,
audited, and its findings scored as the authors score a tool's report.

Each program is a workspace of its own (``programs/<hash>/<hash>.c`` in the output directory): the model's tools
read its own file and nothing else, as each LLM of the paper saw one program at a time; the files stay there, so
what the model was shown can be checked. A program's findings are those of all its units, through the same
findings pipeline as the editor's (``k3lsp.pipeline``), each at its first line in the program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from k3lsp import pipeline, units
from k3lsp.eval import castle_score, running
from k3lsp.eval.castle import Dataset, Program
from k3lsp.eval.castle_score import Reported, Score, TestResult
from k3lsp.eval.cost import Cost
from k3lsp.eval.matrix import Configuration
from k3lsp.run import Target, UnitResult


@dataclass(frozen=True)
class Finding(Reported):
    """A reported finding with what a person reading the report wants beside the scorer's three fields."""

    end_line: int = 0
    title: str = ""


@dataclass
class CastleOutcome:
    """One configuration's CASTLE run."""

    configuration: Configuration
    score: Score
    tests: list[TestResult]
    cost: Cost
    costs: dict[str, Cost]  # per test id
    audited: running.Audited


def programs_as_targets(programs: Sequence[Program], directory: Path) -> dict[Target, Program]:
    """Write each program into a workspace of its own under ``directory`` and split it into units."""
    out: dict[Target, Program] = {}
    for program in programs:
        root = directory / Path(program.name).stem
        root.mkdir(parents=True, exist_ok=True)
        file = root / program.name
        data = program.code.encode("utf-8", "surrogateescape")
        if not file.exists() or file.read_bytes() != data:
            file.write_bytes(data)
        for unit in units.split(program.code):
            out[Target(root, program.name, unit)] = program
    return out


def findings_by_test(results: Sequence[UnitResult], by_target: dict[Target, Program]) -> dict[str, list[Finding]]:
    """Every program's findings, in program lines, through the findings pipeline (every severity: the scorer
    applies the authors' filter)."""
    out: dict[str, list[Finding]] = {}
    for r in results:
        program = by_target[r.target]
        lines = program.code.split("\n")
        found = out.setdefault(program.test_id, [])
        for rep, silenced in pipeline.screened(r.unit, r.findings, lines, "info"):
            if silenced is not None:  # refuted by the model (or suppressed in the source): not reported
                continue
            f = rep.finding
            start, end = r.unit.file_line(f.start_line) + 1, r.unit.file_line(f.end_line) + 1
            found.append(Finding(start, f.cwe, f.severity, end_line=end, title=f.title))
    return out


async def run(dataset: Dataset, configurations: Sequence[Configuration], plan: running.Plan) -> list[CastleOutcome]:
    """Every configuration on the same units, one after the other (so each is timed alone)."""
    by_target = programs_as_targets(dataset.programs(), plan.out / "programs")
    targets = list(by_target)
    outcomes = []
    for i, configuration in enumerate(configurations):
        async with running.pool(configuration, plan) as p:
            audited = await running.audit(p, targets, plan, i * len(targets), len(targets) * len(configurations))
        found = findings_by_test(audited.results, by_target)
        score, tests = castle_score.score(dataset, found)
        per_test: dict[str, list[UnitResult]] = {}
        for r in audited.results:
            per_test.setdefault(by_target[r.target].test_id, []).append(r)
        costs = {test_id: Cost.of(rs) for test_id, rs in per_test.items()}
        outcomes.append(CastleOutcome(configuration, score, tests, Cost.of(audited.results), costs, audited))
    return outcomes
