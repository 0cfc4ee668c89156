"""One configuration's run over the audit core, measured: every unit audited afresh unless the run resumes.

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
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from k3lsp.core.pool import DEFAULT_SLOTS, Pool
from k3lsp.core.replies import Welcome
from k3lsp.core.run import Summary, Target, UnitResult, describe
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


async def audit(p: Pool, targets: Sequence[Target], plan: Plan, done_before: int = 0, total: int = 0) -> Audited:
    """Audit ``targets`` as one background run of ``p``; progress counts from ``done_before`` of ``total``."""
    started = time.monotonic()
    run = p.audit(targets, priority=Priority.BACKGROUND, force=not plan.resume, fresh=True)
    results: list[UnitResult] = []
    total = total or len(targets)

    def progress(note: str) -> None:
        if plan.on_progress is not None:
            plan.on_progress(done_before + len(results), total, note)

    progress("")
    async for result in run.audited(lambda unit, message: progress(describe(unit, message))):
        results.append(result)
        progress("")
    return Audited(results, run.summary, welcome_of(p), time.monotonic() - started)
