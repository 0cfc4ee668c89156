"""The seam between `k3lsp eval fixes` and the review front end (`k3lsp review`, docs/review.md): what the eval
asks of a review of one commit, and what it needs back.

The eval hands the reviewer its pool (the audit core of one configuration of the matrix: its daemons, settings
and run cache) and a commit of the repository; the reviewer reviews that commit as a patch against its parent,
through that pool, and gives back its *introduced* findings in the commit's own coordinates (the file as the
commit leaves it) and the unit results its audits came to (what they cost). The eval decides the rest: which
commits, where the bug was (``k3lsp.eval.bugs``), whether a finding caught it (``k3lsp.eval.catching``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from k3lsp.core.pool import Pool
from k3lsp.core.run import UnitResult
from k3lsp.git import repo as gitrepo
from k3lsp.review import changed as review
from k3lsp.wire import sanitize


@dataclass(frozen=True)
class Introduced:
    """One introduced finding of a review (``introduced: true``): where it is, in the reviewed commit."""

    path: str  # the file, relative to the repository root, `/` separated, as the reviewed commit leaves it
    start_line: int  # 1-based line of that file in the reviewed commit (its post-image), inclusive
    end_line: int  # inclusive; >= start_line
    cwe: int
    severity: str  # critical | high | medium | low | info (the eval applies its own --min-severity)
    title: str = ""


@dataclass(frozen=True)
class CommitReview:
    """What reviewing one commit came to."""

    introduced: tuple[Introduced, ...]  # every introduced finding, of every severity; pre-existing ones left out
    results: tuple[UnitResult, ...] = ()  # every unit result of the review's audits (cached ones too): the cost
    problems: tuple[str, ...] = ()  # why the review is not whole (units failed, left or refused; the patch not
    # read); empty when every unit the patch changes was audited (cut-short units count as audited: their stats
    # say so)


class CommitReviewer(Protocol):
    """The review front end, as the eval uses it."""

    async def review(self, pool: Pool, repo: Path, commit: str, *, force: bool, fresh: bool) -> CommitReview:
        """Review ``commit`` (a full id in ``repo``) as the patch from its first parent, auditing on ``pool`` through
        the audit service (a job with ``force`` and ``fresh``). Raises nothing for a problem of the review itself: it
        goes into ``problems``."""
        ...


class _Review:
    """``k3lsp review``'s review of one commit (``k3lsp.review.changed.review_commit``), in the eval's terms. The
    configuration's settings are the pool's as the matrix made them: its thinking effort stays the eval's."""

    async def review(self, pool: Pool, repo: Path, commit: str, *, force: bool, fresh: bool) -> CommitReview:
        options = pool.options
        try:
            repository = gitrepo.Repository(repo, options.max_file_bytes)
            how = review.ReviewOptions(force=force, fresh=fresh)
            report = await review.review_commit(repository, commit, options, pool, how)
        except (gitrepo.GitError, OSError) as exc:
            return CommitReview((), (), (sanitize.line(f"{commit[:12]}: not reviewed: {exc}"),))
        problems = [*report.errors, *(p.patch.error for p in report.patches if p.patch.error)]
        introduced = tuple(
            Introduced(f.row.uri, f.row.line, f.row.end_line, f.row.cwe, f.row.severity, f.row.title)
            for p in report.patches
            for f in p.introduced
        )
        return CommitReview(introduced, tuple(report.results), tuple(problems))


def reviewer() -> CommitReviewer:
    """The review front end the eval reviews with."""
    return _Review()
