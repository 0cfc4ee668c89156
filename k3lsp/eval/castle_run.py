"""CASTLE through the audit service: each program written out under its blind name, audited like any C file (split,
witnessed, screened), and its findings scored as the authors score a tool's report.

Each program is a workspace of its own (``programs/<hash>/<hash>.c`` in the output directory): the model's tools
read its own file and nothing else, as each LLM of the paper saw one program at a time; the files stay there, so
what the model was shown can be checked. A program's findings are those of all its units, through the same
findings pipeline as the editor's (``k3lsp.findings.pipeline``), each at its first line in the program.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.core.options import Options
from k3lsp.core.run import Summary, UnitResult
from k3lsp.core.service import Document, Event, Prepared, UnitDone
from k3lsp.eval import castle_score, castle_witnesses, running
from k3lsp.eval.castle import Dataset, Program
from k3lsp.eval.castle_score import Reported, Score, TestResult
from k3lsp.eval.cost import Cost
from k3lsp.eval.matrix import Configuration
from k3lsp.witnesses.analyze import Report


@dataclass(frozen=True)
class Finding(Reported):
    """A reported finding with what a person reading the report wants beside the scorer's three fields."""

    end_line: int = 0
    title: str = ""
    message: str = ""


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


async def run(dataset: Dataset, configurations: Sequence[Configuration], plan: running.Plan) -> list[CastleOutcome]:
    """Every configuration on the same programs, one after the other (so each is timed alone), each program a
    document of the audit service: with witnesses, each unit is sent with the alerts on its lines."""
    directory = plan.out / "programs"
    programs = dataset.programs()
    write_programs(programs, directory)
    outcomes = []
    for i, configuration in enumerate(configurations):
        names = configuration.options.witnesses
        versions = dict(castle_witnesses.installed(names)) if names else {}
        docs = {}
        for program in programs:
            file = castle_witnesses.program_file(program, directory)
            docs[Document(file, file.parent, program.name, text=program.code)] = program
        found: dict[str, list[Finding]] = {}
        witnessed: dict[str, Report] = {}

        def told(event: Event, docs=docs, found=found, witnessed=witnessed) -> None:
            if isinstance(event, Prepared) and event.witnessed is not None:
                witnessed[docs[event.doc].test_id] = event.witnessed
            elif isinstance(event, UnitDone):
                found.setdefault(docs[event.doc].test_id, []).extend(reported(event))

        async with running.pool(configuration, plan) as p:
            audited = await running.audit(p, list(docs), plan, told, i, len(configurations))
        score, tests = castle_score.score(dataset, found)
        test_of = {p.name: p.test_id for p in programs}
        per_test: dict[str, list[UnitResult]] = {}
        for r in audited.results:
            per_test.setdefault(test_of[r.target.path], []).append(r)
        costs = {test_id: Cost.of(rs) for test_id, rs in per_test.items()}
        problems = castle_witnesses.problems(witnessed)
        outcomes.append(
            CastleOutcome(configuration, score, tests, Cost.of(audited.results), costs, audited, problems, versions)
        )
    return outcomes


def reported(event: UnitDone) -> list[Finding]:
    """A unit's findings the findings pipeline reports (every severity unless the settings say otherwise: the scorer
    applies the authors' filter), in program lines; refuted or suppressed ones are not reported."""
    unit = event.result.unit
    return [
        Finding(
            unit.file_line(r.finding.start_line) + 1, r.finding.cwe, r.finding.severity,
            end_line=unit.file_line(r.finding.end_line) + 1, title=r.finding.title, message=r.finding.message,
        )
        for r, silenced in event.findings
        if silenced is None
    ]  # fmt: skip


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
