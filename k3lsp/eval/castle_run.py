"""CASTLE through the audit core: each program written out under its blind name, split into units like any C file,
audited, and its findings scored as the authors score a tool's report.

Each program is a workspace of its own (``programs/<hash>/<hash>.c`` in the output directory): the model's tools
read its own file and nothing else, as each LLM of the paper saw one program at a time; the files stay there, so
what the model was shown can be checked. A program's findings are those of all its units, through the same
findings pipeline as the editor's (``k3lsp.findings.pipeline``), each at its first line in the program.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from k3lsp.core.options import Options
from k3lsp.core.run import Summary, Target, UnitResult
from k3lsp.eval import castle_score, castle_witnesses, running
from k3lsp.eval.castle import Dataset, Program
from k3lsp.eval.castle_score import Reported, Score, TestResult
from k3lsp.eval.cost import Cost
from k3lsp.eval.matrix import Configuration
from k3lsp.findings import pipeline
from k3lsp.units import split as units
from k3lsp.witnesses import shown
from k3lsp.witnesses.analyze import Report


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
    problems: list[str] = field(default_factory=list)  # beside the audit's own: analyzers that gave no answer
    analyzers: dict[str, str] = field(default_factory=dict)  # the witnesses that ran: name -> its --version line


def write_programs(programs: Sequence[Program], directory: Path) -> None:
    """Write each program into a workspace of its own under ``directory`` (``castle_witnesses.program_file``)."""
    for program in programs:
        file = castle_witnesses.program_file(program, directory)
        file.parent.mkdir(parents=True, exist_ok=True)
        data = program.code.encode("utf-8", "surrogateescape")
        if not file.exists() or file.read_bytes() != data:
            file.write_bytes(data)


def programs_as_targets(programs: Sequence[Program], directory: Path) -> dict[Target, Program]:
    """Write each program into a workspace of its own under ``directory`` and split it into units."""
    write_programs(programs, directory)
    out: dict[Target, Program] = {}
    for program in programs:
        root = castle_witnesses.program_file(program, directory).parent
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
    """Every configuration on the same units, one after the other (so each is timed alone). A configuration with
    witnesses sends each unit with the alerts on its lines (the analyzers run once per set of them)."""
    directory = plan.out / "programs"
    programs = dataset.programs()
    plain = programs_as_targets(programs, directory)
    witnessed: dict[tuple[str, ...], tuple[dict[str, str], dict[str, Report]]] = {}
    outcomes = []
    for i, configuration in enumerate(configurations):
        names = configuration.options.witnesses
        by_target, problems, versions = plain, [], {}
        if names:
            if names not in witnessed:
                ran = dict(castle_witnesses.installed(names))
                witnessed[names] = ran, await castle_witnesses.reports(programs, directory, names, plan)
            versions, found = witnessed[names]
            by_target = {
                replace(t, alerts=shown.for_unit(found[p.test_id].alerts, t.unit)): p for t, p in plain.items()
            }
            problems = castle_witnesses.problems(found)
        targets = list(by_target)
        async with running.pool(configuration, plan) as p:
            audited = await running.audit(p, targets, plan, i * len(targets), len(targets) * len(configurations))
        score, tests = castle_score.score(dataset, findings_by_test(audited.results, by_target))
        per_test: dict[str, list[UnitResult]] = {}
        for r in audited.results:
            per_test.setdefault(by_target[r.target].test_id, []).append(r)
        costs = {test_id: Cost.of(rs) for test_id, rs in per_test.items()}
        cost = Cost.of(audited.results)
        outcomes.append(CastleOutcome(configuration, score, tests, cost, costs, audited, problems, versions))
    return outcomes


async def alone(dataset: Dataset, base: Options, names: Sequence[str], plan: running.Plan) -> list[CastleOutcome]:
    """``--witnesses-only``: the analyzers without the model, one outcome each (named with its version), then
    their union when more than one ran. ``names`` empty: every known analyzer that is installed."""
    tools = castle_witnesses.installed(names)
    programs = dataset.programs()
    directory = plan.out / "programs"
    write_programs(programs, directory)  # the analyzers read the files; nothing is split into units
    started = time.monotonic()
    found = await castle_witnesses.reports(programs, directory, [t for t, _ in tools], plan)
    audited = running.Audited([], Summary(), None, time.monotonic() - started)
    problems = castle_witnesses.problems(found)
    versions = dict(tools)
    rows = [(t, f"{t} alone", {t: versions[t]}) for t in versions]
    if len(tools) > 1:
        rows.append((castle_witnesses.UNION, "union of " + ", ".join(versions), versions))
    outcomes = []
    for tool, name, used in rows:
        score, tests = castle_score.score(dataset, castle_witnesses.by_tool(found, tool))
        mine = [p for p in problems if tool == castle_witnesses.UNION or f": {tool}: " in p]
        configuration = Configuration(name, {"witnesses": list(used)}, base)
        outcomes.append(CastleOutcome(configuration, score, tests, Cost(), {}, audited, mine, used))
    return outcomes
