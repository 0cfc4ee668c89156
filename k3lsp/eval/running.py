"""One configuration's run over the audit service, measured: every unit audited afresh unless the run resumes.

An eval measures, so it never takes an answer it did not ask for: the pool's lookup is skipped (``force``) and the
daemon is asked not to answer from its team result store (``fresh``). Every unit's complete result still goes into
the run's own cache, one file per configuration in the output directory (``cache/<configuration>.sqlite3``; one
per configuration because a result at a higher thinking effort would answer a lower one), so an interrupted run
loses nothing: ``--resume`` looks there first and audits only the rest, the way ``k3lsp audit`` reruns
(docs/batch.md). The user's own result cache is never read nor written.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from k3lsp.core.pool import DEFAULT_SLOTS, Pool
from k3lsp.core.replies import Welcome
from k3lsp.core.run import Summary, UnitResult
from k3lsp.core.service import AuditService, Document, Event, Job, Listener, Progress, UnitDone
from k3lsp.eval.matrix import Configuration
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import Priority

OnProgress = Callable[[int, int, str], None]  # (units done, units in all, the daemon's latest note)


@dataclass(frozen=True)
class Plan:
    """How every configuration of one eval runs."""

    out: Path  # the output directory: report, charts, the run caches, the programs as sent
    resume: bool = False
    jobs: int = DEFAULT_SLOTS  # units in flight per daemon
    on_progress: OnProgress | None = None

    def cache(self, configuration: Configuration) -> ResultCache:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", configuration.name).strip("-") or "default"
        return ResultCache(self.out / "cache" / f"{slug}.sqlite3")


@dataclass
class Audited:
    """What one configuration's units came to."""

    results: list[UnitResult]
    summary: Summary
    welcome: Welcome | None  # the first daemon's, as it answered
    seconds: float  # wall time of the run


@contextlib.asynccontextmanager
async def pool(configuration: Configuration, plan: Plan) -> AsyncIterator[Pool]:
    """The audit core for one configuration, its cache the run's own."""
    cache = plan.cache(configuration)
    p = Pool(configuration.options, cache, client_name="k3lsp-eval", slots=plan.jobs)
    try:
        yield p
    finally:
        await p.close()
        cache.close()


def welcome_of(p: Pool) -> Welcome | None:
    return next((c.welcome for c in p.connections if c.welcome is not None), None)


async def audit(
    p: Pool, docs: Sequence[Document], plan: Plan, told: Listener, done_before: int = 0, runs: int = 1
) -> Audited:
    """Audit ``docs`` as one background job of the audit service on ``p``, every unit afresh unless the run resumes;
    ``told`` gets the service's events. Progress counts this job's units as the ``done_before``-th of ``runs``
    alike (the configurations of one eval, each over the same units)."""
    started = time.monotonic()
    results: list[UnitResult] = []

    def listen(event: Event) -> Awaitable[None] | None:
        if isinstance(event, Progress) and plan.on_progress is not None:
            plan.on_progress(done_before * event.total + event.done, runs * event.total, event.note)
        elif isinstance(event, UnitDone) and event.first:
            results.append(event.result)
        return told(event)

    job = Job(priority=Priority.BACKGROUND, force=not plan.resume, fresh=True)
    outcome = await AuditService(p).audit(docs, listen, job)
    return Audited(results, outcome.summary, welcome_of(p), time.monotonic() - started)
