"""The analyzer witnesses on CASTLE (docs/witnesses.md): each program's alerts, for two uses.

- ``k3lsp eval castle --witnesses-only``: the analyzers alone, each and their union, scored as the authors scored
  a tool (``k3lsp.eval.castle_score``), so they stand in the CASTLE table beside the paper's rows for the same
  tools. No daemon is asked. The paper ran ``cppcheck --enable=all --language=c`` and left out its ``style`` and
  ``information`` alerts; the cppcheck adapter runs it that way and leaves those out already.
- a configuration with the ``witnesses`` setting (``--matrix witnesses=...``): the alerts go to the model with each
  unit, as the editor sends them, and the model's verdicts decide what is reported.

Each program is analyzed in the workspace ``castle_run`` wrote it to, under its blind name: no file name says a
label. An analyzer that is missing, times out or fails is a problem of the run (said, never a silent zero).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from k3lsp.eval import running
from k3lsp.eval.castle import Program
from k3lsp.eval.castle_score import Reported
from k3lsp.witnesses.adapters import ADAPTERS
from k3lsp.witnesses.analyze import Report, analyze, find

ALERT_SEVERITY = "medium"  # an alert counts whatever the tool's level: the scorer keeps critical, high and medium
NO_CWE = 0  # an alert the tool gave no CWE and the mapping none: it can match on its line only
UNION = "union"


def program_file(program: Program, directory: Path) -> Path:
    """Where ``castle_run.write_programs`` writes a program: a workspace of its own under ``directory``."""
    return directory / Path(program.name).stem / program.name


async def reports(
    programs: Sequence[Program], directory: Path, names: Sequence[str], plan: running.Plan
) -> dict[str, Report]:
    """Every program's witness report, by test id. The analyzers are child processes: as many programs are
    analyzed at once as this machine has cores."""
    gate = asyncio.Semaphore(os.cpu_count() or 1)
    done = 0

    async def one(program: Program) -> tuple[str, Report]:
        nonlocal done
        path = program_file(program, directory)
        async with gate:
            report = await asyncio.to_thread(analyze, path, program.code, path.parent, names)
        done += 1
        if plan.on_progress is not None:
            plan.on_progress(done, len(programs), "witnesses")
        return program.test_id, report

    return dict(await asyncio.gather(*(one(p) for p in programs)))


class WitnessError(ValueError):
    """Analyzers asked for that this machine does not have (or that do not exist): said with the install hint."""


def installed(names: Sequence[str]) -> list[tuple[str, str]]:
    """The analyzers to run and their versions: ``names``, each of which must be installed, or (none named) every
    known analyzer that is."""
    if not names:
        found = [(n, f.version) for n in ADAPTERS if (f := find(n)) is not None]
        if not found:
            raise WitnessError(f"no analyzer is installed (known: {', '.join(ADAPTERS)}); `k3lsp witnesses` says how")
        return found
    out = []
    for name in names:
        adapter, f = ADAPTERS.get(name), find(name) if name in ADAPTERS else None
        if adapter is None:
            raise WitnessError(f"unknown witness {name!r} (known: {', '.join(ADAPTERS)})")
        if f is None:
            raise WitnessError(f"{name} is not installed: {adapter.hint}")
        out.append((name, f.version))
    return out


def problems(found: dict[str, Report]) -> list[str]:
    """Every analyzer run that gave no answer (timed out, failed), by test id."""
    return sorted(
        f"{test_id}: {run.tool}: {run.problem}" for test_id, r in found.items() for run in r.runs if run.problem
    )


def by_tool(found: dict[str, Report], tool: str) -> dict[str, list[Reported]]:
    """One analyzer's alerts (or, for ``UNION``, every analyzer's) as the scorer reads a report, by test id; the
    union's duplicates (two tools, one line, one CWE) count once."""
    return {
        test_id: list(
            dict.fromkeys(
                Reported(a.line, a.cwe or NO_CWE, ALERT_SEVERITY) for a in r.alerts if tool in (UNION, a.tool)
            )
        )
        for test_id, r in found.items()
    }
