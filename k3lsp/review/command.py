"""``k3lsp review`` as a command: which patches the flags name, one review of them, the report written.

What is reviewed: ``A..B`` (every commit of the range, oldest first; merges are left out and said so), one
commit, ``--staged`` (the index against HEAD), ``--patch FILE`` (a patch, a mail, or an mbox of a series,
applied in memory to ``--base``, default HEAD), or by default the work tree against ``--base`` (default HEAD).
The review itself is ``k3lsp.review.changed``; the formats are ``k3lsp.review.output``. Exit status: 0 clean, 1 an
introduced finding at or above ``--fail-on``, 2 errors (something not reviewed; the report says what), 130 / 143
interrupted by SIGINT / SIGTERM (the report, SARIF too, holds what was reviewed before it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import replace

from k3lsp.cli import batch, terminal
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.git import patches
from k3lsp.git import repo as gitrepo
from k3lsp.review import changed as review
from k3lsp.review import mbox, series
from k3lsp.review import output as review_output
from k3lsp.review.series import Patch
from k3lsp.wire import ending, sanitize
from k3lsp.wire.cache import ResultCache


def under_review(args: argparse.Namespace, repo: gitrepo.Repository, options: Options) -> tuple[list[Patch], list[str]]:
    """The patches the flags name, and warnings (merges left out of a range)."""
    wanted = options.wants
    if args.patch is not None:
        if args.revision:
            raise gitrepo.GitError("give a revision or --patch, not both")
        return series.mails(repo.tree(repo.commit(args.base or "HEAD")), mbox.read(args.patch)), []
    if args.revision:
        return series.revision(repo, args.revision, wanted)
    if args.staged:
        return [series.staged(repo, wanted)], []
    base = args.base or "HEAD"
    return [series.worktree(repo, repo.commit(base), wanted, base)], []


def run(args: argparse.Namespace, options: Options, endpoints: Sequence[str], jobs: int) -> int:
    first, *others = endpoints
    options = review.review_options(replace(options, endpoint=first, other_endpoints=tuple(others)))
    fmt = "json" if args.json else args.format
    try:
        repo = gitrepo.Repository(args.repo, options.max_file_bytes)
        found, warnings = under_review(args, repo, options)
    except (gitrepo.GitError, patches.PatchError, OSError) as exc:
        print(sanitize.line(f"k3lsp review: error: {exc}"), file=sys.stderr)
        return batch.EXIT_ERROR
    how = review.ReviewOptions(callers=args.callers, allow_incomplete=args.allow_incomplete)

    stop = ending.Stop()  # SIGINT/SIGTERM: end the requests, report what was reviewed (it is cached)

    cache_said: list[str] = []  # an unusable K3LSP_CACHE_DIR or size: a warning of the report, not a log line

    async def reviewed(on_progress) -> review.ReviewReport:
        pool = Pool(options, ResultCache(on_problem=cache_said.append), client_name="k3lsp-review", slots=jobs)
        try:
            with stop.catching():
                return await review.review_patches(found, repo, options, pool, how, on_progress, stop.event)
        finally:
            await pool.close()

    with terminal.progress_bar(sys.stderr.isatty()) as on_progress:
        report = asyncio.run(reviewed(on_progress))
    report.warnings[:0] = warnings + cache_said
    if args.patch is not None and any(_unapplied(p) for p in found):
        base = args.base or "HEAD"
        report.errors.append(
            f"the series does not apply to {base} ({repo.commit(base).short}): name the commit it was written "
            "against with --base REV (b4 and git format-patch --base record it as base-commit:)"
        )
    status = report.exit_status(args.fail_on)
    status = stop.exit_status(status) if report.interrupted else status
    review_output.print_problems(report)
    formats = {
        "sarif": terminal.json_to(lambda: review_output.to_sarif(report, status, args.sarif_runs)),
        "json": lambda out: review_output.print_json(report, out),
        "email": lambda out: review_output.print_email(report, out),
        "text": lambda out: review_output.print_text(report, out),
    }
    return status if terminal.write_report(args.output, formats, fmt, "review") else batch.EXIT_ERROR


def _unapplied(patch: Patch) -> bool:
    """A patch of the series that does not apply to the base (k3lsp.review.series words it so), not one that cannot be
    read: only the first kind is helped by another --base."""
    return bool(patch.error) and ("does not apply" in patch.error or "the base has no such file" in patch.error)
