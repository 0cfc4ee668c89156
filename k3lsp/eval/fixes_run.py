"""A project's own bug history through the review front end: each introducing commit reviewed as a patch, each
review judged against the lines its fix later changed.

Every configuration of the matrix reviews the same cases, one configuration after the other; within one, up to
``jobs`` commits are in review at once (their units share the pool's queue, so the daemons stay busy while one
commit's review waits for its last unit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from k3lsp.core.replies import Welcome
from k3lsp.eval import catching, running
from k3lsp.eval.bugs import Bug
from k3lsp.eval.catching import Judged, Rate, Tally
from k3lsp.eval.cost import Cost
from k3lsp.eval.matrix import Configuration
from k3lsp.eval.review import CommitReview, CommitReviewer
from k3lsp.wire import sanitize


@dataclass(frozen=True)
class Judging:
    """How the reviews are judged: the catch window, the findings that count, the subsystem depth."""

    window: int = catching.DEFAULT_WINDOW
    min_severity: str = "medium"
    depth: int = catching.DEFAULT_DEPTH


@dataclass
class FixesOutcome:
    configuration: Configuration
    judged: list[Judged]
    tally: Tally
    directories: dict[str, Rate]
    cost: Cost
    seconds: float  # wall time of the configuration's reviews
    welcome: Welcome | None


async def _review(reviewer: CommitReviewer, pool, repo: Path, bug: Bug, plan: running.Plan) -> CommitReview:
    """One review; a review that raises is a review with a problem, never the end of the run."""
    try:
        return await reviewer.review(pool, repo, bug.case.introducing, force=not plan.resume, fresh=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return CommitReview((), (), (sanitize.line(f"the review failed: {type(exc).__name__}: {exc}"),))


@dataclass
class _Progress:
    total: int
    plan: running.Plan
    done: int = 0

    def reviewed(self, bug: Bug) -> None:
        self.done += 1
        if self.plan.on_progress is not None:
            self.plan.on_progress(self.done, self.total, bug.case.introducing[:12])


async def _gated(
    gate: asyncio.Semaphore,
    reviewer: CommitReviewer,
    pool,
    repo: Path,
    bug: Bug,
    plan: running.Plan,
    progress: _Progress,
) -> CommitReview:
    async with gate:
        review = await _review(reviewer, pool, repo, bug, plan)
    progress.reviewed(bug)
    return review


async def run(
    repo: Path,
    bugs: Sequence[Bug],
    reviewer: CommitReviewer,
    configurations: Sequence[Configuration],
    plan: running.Plan,
    judging: Judging = Judging(),
) -> list[FixesOutcome]:
    outcomes = []
    progress = _Progress(len(bugs) * len(configurations), plan)
    for configuration in configurations:
        async with running.pool(configuration, plan) as p:
            started = time.monotonic()
            gate = asyncio.Semaphore(plan.jobs)
            reviews = await asyncio.gather(*(_gated(gate, reviewer, p, repo, b, plan, progress) for b in bugs))
            seconds, welcome = time.monotonic() - started, running.welcome_of(p)
        judged = [
            catching.judge(b, r, judging.window, judging.min_severity) for b, r in zip(bugs, reviews, strict=True)
        ]
        cost = Cost.of(u for r in reviews for u in r.results)
        outcomes.append(
            FixesOutcome(
                configuration,
                judged,
                catching.tally(judged),
                catching.by_directory(judged, judging.depth),
                cost,
                seconds,
                welcome,
            )
        )
    return outcomes
