"""What a batch front end keeps of an audit-service job, whatever its report looks like.

``k3lsp audit`` and ``k3lsp review`` report differently (rows per file, findings per patch), but they keep the
same things of the service's events: the witnesses' and the kconfig's notes, the files that could not be audited,
how many units are done for the progress line, and, when a signal ends the job, the one line that says how far it
got and that a rerun costs only the rest; then the run's summary as errors and warnings, and how many units the
kconfig does not build (skipped or not) and why. Each of their listeners hands every
event to a :class:`Tally` first, and awaits the job through :meth:`Tally.run`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from k3lsp.core import service, tasks
from k3lsp.core.run import Summary

ProgressLine = Callable[[int, int, str], None]  # (units done, units in all, the daemon's word)


class Report(Protocol):
    """The part of a front end's report a tally writes."""

    errors: list[str]  # something was not audited: exit status 2
    warnings: list[str]  # worth knowing, nothing lost
    interrupted: bool  # a signal ended the job early: the report holds what was done


@dataclass
class Tally:
    report: Report
    on_progress: ProgressLine | None = None
    done: int = 0  # units with an outcome, over the job (the service's Progress)
    units: int = 0  # units picked to audit, over the job's documents

    def __call__(self, event: service.Event) -> None:
        if isinstance(event, service.Prepared):
            self.units += len(event.targets)
            self.report.warnings += [n for n in event.notes() if n not in self.report.warnings]
        elif isinstance(event, service.Progress):
            self.done = event.done
            if self.on_progress is not None:
                self.on_progress(event.done, event.total, event.note)
        elif isinstance(event, service.FileDone) and event.outcome.error is not None:
            self.report.errors.append(event.outcome.error)

    async def run(
        self,
        audits: service.AuditService,
        docs: Sequence[service.Document],
        listener: service.Listener,
        job: service.Job,
        stop: asyncio.Event,
        *,
        allow_incomplete: bool,
        rerun: str,
    ) -> Summary | None:
        """The job until it ends or ``stop`` is set, its summary written to the report as errors and warnings;
        None when stopped, the report saying how far it got (``rerun``: what a rerun does, "audits", "reviews")."""
        try:
            outcome = await tasks.until_stopped(audits.audit(docs, listener, job), stop)
        except tasks.Interrupted:
            self.report.interrupted = True
            self.report.errors.append(
                f"interrupted: {self.done} of {self.units} units done; their results are cached, "
                f"a rerun {rerun} only the rest"
            )
            return None
        errors, warnings = problems(outcome.summary, allow_incomplete)
        self.report.errors += errors
        self.report.warnings += warnings
        said = outcome.skipped.said() if outcome.skipped is not None else None
        if said is not None:  # how many units the kconfig does not build, and why; with --only-built, left out
            self.report.warnings.append(said)
        return outcome.summary


def problems(summary: Summary, allow_incomplete: bool) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a run: what was not audited, or not completely."""
    errors: list[str] = []
    warnings = list(summary.dropped)
    incomplete = warnings if allow_incomplete else errors  # where cut-short units go
    for r in summary.refused:
        errors.append(f"{r.target.path}: {r.unit.name}: too long to audit: {r.refusal}")
    for r in summary.incomplete:  # not a clean pass: its findings may be missing
        incomplete.append(
            f"{r.target.path}: {r.unit.name}: the audit was cut short ({r.cut_short}), findings may be missing; "
            "not cached, a rerun audits it again"
        )
    for f in summary.failed:
        errors.append(f"{f.target.path}: {f.target.unit.name}: not audited ({f.code}): {f.message}")
    if summary.over_limit:
        warnings.append(f"{summary.over_limit} findings beyond the bounds of one unit were dropped (k3lsp.wire.bounds)")
    if summary.left:
        errors.append(
            f"{len(summary.left)} of {summary.units} units not audited: no daemon left ({summary.unavailable})"
        )
    return errors, warnings
