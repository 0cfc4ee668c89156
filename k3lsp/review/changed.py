"""``k3lsp review``: patches reviewed as kernel auditors review them. The functions a patch changes are audited
with the change in view, and each finding is either introduced by the patch or was there before it.

For each patch (``k3lsp.review.series.Patch``: a commit, the index, the work tree, a mail of a series), in order:

1. **what it changed**: every C file it leaves behind (``include``/``exclude``, ``maxFileBytes``) is split into
   units (``k3lsp.units.split``, in the post-image) and the units holding a line the patch added or modified
   (``k3lsp.git.patches.changed_lines``; a line of blanks alone does not count) are the patch's units;
2. **with the change in view**: each file goes to the audit service (``k3lsp.core.service``: witnesses, cache,
   daemons, tools, budgets, as for every front end) with its change set, and each unit the change touched is
   audited as a :class:`~k3lsp.core.run.Target` with :class:`~k3lsp.core.run.Changes`: its changed lines (in the
   unit's gutter for the model) and the function as it was before the patch (the pre-image unit of the same
   name; none for a new function). Its cache entry is its own (``Target.key``): a reviewed unit never answers
   for the same unit audited without the change, nor the other way round;
3. **callers** (``ReviewOptions.callers``): the functions that call a changed function (one hop, from the work
   tree's symbol index and a whole-word search, ``k3lsp.tools.sandbox.references``) are audited too, at background
   priority, as ordinary units (their cache is the editor's);
4. **introduced or pre-existing**: every finding goes through the findings pipeline (``k3lsp.findings.pipeline``: the
   same acceptance, severity, suppressions, baseline and fingerprints as the editor, less what the patches under
   review add to silence it: ``k3lsp.findings.silencing``; such a finding is reported with ``silenced_by_patch``) and is
   *introduced* when
   its lines meet the lines the patch added or modified (``why`` ``lines``), or when the model says the change
   introduced it (``why`` ``model``); otherwise it is pre-existing, kept and shown apart (the reviewer
   decides). Findings in callers are pre-existing (their code did not change).

All patches' units go to the daemons as one run (the daemons batch them), interactive by default; the thinking
effort is the options' (``k3lsp review`` sends ``high`` unless told otherwise: :func:`review_options`).

The model's tools read the repository's work tree as it is on disk (there is no other checkout): for a commit
other than the one checked out, what the model reads beyond its unit may be of another version. A bare
repository gives the model no tools, and no callers.

Library API, for ``k3lsp review`` and other front ends (``k3lsp eval``'s fixes mode reviews an introducing
commit as a patch)::

    from k3lsp import gitrepo, review
    from k3lsp.core.pool import Pool
    from k3lsp.wire.cache import ResultCache

    options = review.review_options(options)            # effort high unless the user chose one
    repo = gitrepo.Repository(path, options.max_file_bytes)
    pool = Pool(options, ResultCache(), client_name="k3lsp-eval")
    report = await review.review_commit(repo, "abc123", options, pool)   # -> ReviewReport
    for patch in report.patches:                       # one PatchReview per patch, in order
        for f in patch.findings:                       # ReviewFinding: introduced ones first
            f.introduced, f.why                        # True/False; "lines", "model" or ""
            f.row.path, f.row.uri, f.row.line, f.row.end_line   # file lines, 1-based (k3lsp.findings.report.Reported)
            f.row.cwe, f.row.severity, f.row.title, f.row.unit, f.row.fingerprint
    report.errors, report.exit_status("medium")        # 0, 1 (an introduced finding at or above), 2

``review_patches(patches, repo, options, pool, how)`` reviews any list of patches (``k3lsp.review.series``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import unidiff

from k3lsp.cli import batch
from k3lsp.cli.batch import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, Source
from k3lsp.core import service
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.run import Counters, Target, UnitResult
from k3lsp.core.tally import ProgressLine, Tally
from k3lsp.findings import model as findings
from k3lsp.findings import pipeline, suppress
from k3lsp.findings.report import Reported
from k3lsp.findings.silencing import Silencers
from k3lsp.git.patches import changed_lines
from k3lsp.git.repo import Repository, WorktreeSnapshot
from k3lsp.kbuild.state import State
from k3lsp.review.series import Patch, commit
from k3lsp.tools import sandbox, symbols
from k3lsp.units import split as units
from k3lsp.wire.protocol import Priority

LINES, MODEL = "lines", "model"  # why a finding is introduced: its lines meet the change's, or the model says so
MAX_CALLERS = 16  # caller units audited per changed function: a core helper has thousands
INDEX_SECONDS = 120.0  # how long callers wait for the work tree's symbol index to be built


@dataclass(frozen=True)
class ReviewOptions:
    """How a review runs, beyond the settings (``Options``)."""

    callers: bool = False  # audit the callers of changed functions too, at background priority
    priority: Priority = Priority.INTERACTIVE  # of the patches' own units
    allow_incomplete: bool = False  # a unit cut short is a warning, not an error
    force: bool = False  # skip the run cache (a re-review); ``Pool.audit``'s
    fresh: bool = False  # ask the daemons not to answer from their caches either (an eval measures the model)


@dataclass(frozen=True)
class ReviewFinding:
    """One finding of a review: its report row (file coordinates, as ``k3lsp audit`` reports it), whether the
    patch introduced it and why (``LINES``, ``MODEL``; "" for a pre-existing one), and whether it was found in
    a caller of a changed function."""

    row: Reported
    introduced: bool
    why: str = ""
    caller: bool = False
    silenced_by_patch: str = ""  # what the patch itself added to silence it (IN_SOURCE, EXTERNAL): not applied


@dataclass(frozen=True)
class ReviewedFile:
    """A C file of a patch under review: its post-image, the lines the patch added or modified (1-based) and the
    file before the patch ("" for a file it adds; the callers' files have no change)."""

    source: Source
    old_path: str | None
    hunks: tuple[unidiff.Hunk, ...]
    changed: frozenset[int]
    before: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.source.lines)

    def touched(self) -> list[units.Unit]:
        """Its units the patch changed: what the audit service picks for its change set."""
        return [u for u, _ in service.changed_units(self.source.units, self.source.lines, self.changed, ())]


@dataclass
class PatchReview:
    """What one patch came to."""

    patch: Patch
    files: dict[str, ReviewedFile] = field(default_factory=dict)  # by post-image path
    units: list[Target] = field(default_factory=list)  # its changed units, audited with the change in view
    callers: list[Target] = field(default_factory=list)
    findings: list[ReviewFinding] = field(default_factory=list)  # introduced first, then by path and line
    silenced: list[ReviewFinding] = field(default_factory=list)  # suppressed in the source or baselined
    notes: list[str] = field(default_factory=list)  # files of the patch not reviewed, and why

    @property
    def introduced(self) -> list[ReviewFinding]:
        return [f for f in self.findings if f.introduced]

    @property
    def silenced_by_patch(self) -> list[ReviewFinding]:
        """Its findings that only what the patch itself adds would silence (reported, not silenced)."""
        return [f for f in self.findings if f.silenced_by_patch]

    @property
    def preexisting(self) -> list[ReviewFinding]:
        return [f for f in self.findings if not f.introduced]


@dataclass
class ReviewReport:
    root: Path  # what findings' paths are relative to (SARIF's SRCROOT)
    patches: list[PatchReview] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # something was not reviewed: exit status 2
    warnings: list[str] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    results: list[UnitResult] = field(default_factory=list)  # every unit result, cached ones too: the cost
    interrupted: bool = False  # a signal ended the review early: it holds what was reviewed

    def exit_status(self, fail_on: str) -> int:
        """2 on errors (a patch or unit not reviewed), else 1 when a patch introduced a finding at or above
        ``fail_on``, else 0. Pre-existing findings never fail a review."""
        if self.errors or any(p.patch.error for p in self.patches):
            return EXIT_ERROR
        limit = findings.severity_rank(fail_on)
        bad = [f for p in self.patches for f in p.introduced if findings.severity_rank(f.row.severity) <= limit]
        return EXIT_FINDINGS if bad else EXIT_CLEAN


def review_options(options: Options) -> Options:
    """The settings for a review: thinking effort ``high`` unless one was chosen (a review is read closely)."""
    return options if options.thinking_effort != "auto" else replace(options, thinking_effort="high")


async def review_commit(
    repo: Repository, rev: str, options: Options, pool: Pool, how: ReviewOptions = ReviewOptions()
) -> ReviewReport:
    """One commit reviewed as a patch against its first parent."""
    return await review_patches([commit(repo, repo.commit(rev), options.wants)], repo, options, pool, how)


async def review_patches(
    patches: Sequence[Patch],
    repo: Repository,
    options: Options,
    pool: Pool,
    how: ReviewOptions = ReviewOptions(),
    on_progress: ProgressLine | None = None,
    stop: asyncio.Event | None = None,
) -> ReviewReport:
    """Review patches in order (see the module docstring). Never raises for a patch, file or daemon problem:
    they become the report's errors and notes. ``stop`` (SIGINT, SIGTERM) ends it early: the report holds what
    was reviewed, and says so (``interrupted``)."""
    report = ReviewReport(repo.root)
    audits = service.AuditService(pool)
    problem = audits.reachability.problem(repo.root, options.kconfig) if options.kconfig else None
    if problem is not None:  # the kconfig cannot say what the tree builds: one error, nothing reviewed
        report.errors.append(problem)
        return report
    tools = repo.workdir
    baseline = suppress.Baseline.load(tools) if tools is not None else None
    if baseline is not None and baseline.error:
        report.errors.append(baseline.error)
    silencers = Silencers.of(baseline, patches[0].before if patches else None)  # what the patches add does not count
    reviews = [plan(p, repo.root, options) for p in patches]
    docs: dict[service.Document, tuple[PatchReview, ReviewedFile]] = {}
    for r in reviews:
        for path, file in r.files.items():
            change = service.ChangeSet(file.changed, file.before)
            doc = service.Document(repo.root / path, tools, path, file.text, change=change, units=file.source.units)
            docs[doc] = (r, file)
    if how.callers:
        for r, path, unit in await _find_callers(reviews, tools, repo.root, options, report):
            at = frozenset({unit.start_line})
            file = r.files[path]
            doc = service.Document(
                repo.root / path, tools, path, file.text, at, priority=Priority.BACKGROUND, units=file.source.units
            )
            docs[doc] = (r, r.files[path])
    tally = Tally(report, on_progress)

    def told(event: service.Event) -> None:
        tally(event)
        if isinstance(event, service.Prepared):
            owner = docs[event.doc][0]
            (owner.units if event.doc.change is not None else owner.callers).extend(event.targets)
        elif isinstance(event, service.UnitDone):
            if event.first:  # a unit two patches leave the same is audited once: one result of the review
                report.results.append(event.result)
            owner, file = docs[event.doc]
            _record(owner, file, event.result, options, silencers, event.state)

    job = service.Job(priority=how.priority, force=how.force, fresh=how.fresh, only_built=options.only_built())
    stop = stop or asyncio.Event()
    await tally.run(audits, list(docs), told, job, stop, allow_incomplete=how.allow_incomplete, rerun="reviews")
    for r in reviews:
        r.findings.sort(key=lambda f: (not f.introduced, f.caller, f.row.path, f.row.line, f.row.cwe))
        r.silenced.sort(key=lambda f: (f.row.path, f.row.line, f.row.cwe))
    report.patches = reviews
    report.counters = pool.counters
    return report


def plan(patch: Patch, root: Path, options: Options) -> PatchReview:
    """The patch's C files with a line it added or modified, each as the patch leaves it and with its change (its
    units are the audit service's to pick: ``k3lsp.core.service.changed_units``), and notes on the others."""
    review = PatchReview(patch)
    if patch.error:
        return review
    for change in patch.files:
        path = change.new_path
        if path is None:
            if change.old_path is not None and options.wants(change.old_path):
                review.notes.append(f"{change.old_path}: deleted")
            continue
        if not options.wants(path):
            continue
        if change.binary:
            review.notes.append(f"{path}: binary, not reviewed")
            continue
        data = patch.after.read(path)
        if data is None:
            review.notes.append(f"{path}: not read (not a regular file, unreadable, or over maxFileBytes)")
            continue
        text = data.decode("utf-8", "surrogateescape")
        lines = text.split("\n")
        changed = frozenset(n for n in changed_lines(change.hunks) if 0 < n <= len(lines))
        if not changed:
            continue
        old = patch.before.read(change.old_path) if change.old_path is not None else None
        before = old.decode("utf-8", "surrogateescape") if old is not None else ""
        source = Source(root / path, path, lines, units.split(text, options.kernel_macros))
        review.files[path] = ReviewedFile(source, change.old_path, change.hunks, changed, before)
    return review


def _record(
    review: PatchReview,
    reviewed: ReviewedFile,
    result: UnitResult,
    options: Options,
    silencers: Silencers,
    state: State | None = None,
) -> None:
    """One unit's findings in a patch's review: introduced or pre-existing, reported or silenced (by what the
    base of the patches had: ``k3lsp.findings.silencing``)."""
    target = result.target
    caller = target.changes is None
    changed = frozenset() if caller else reviewed.changed
    source = reviewed.source
    path = reviewed.old_path or target.path
    screened = silencers.screened(
        target.unit, result.findings, source.lines, path, reviewed.changed, review.patch.after, options.min_severity
    )
    for r, silenced, by_patch in screened:
        if silenced == pipeline.REFUTED and options.show_refuted:  # the showRefuted setting, as for every front end
            silenced = None
        first, last = target.unit.file_line(r.finding.start_line) + 1, target.unit.file_line(r.finding.end_line) + 1
        why = (
            LINES if any(first <= n <= last for n in changed) else MODEL if r.finding.introduced and not caller else ""
        )
        found = ReviewFinding(batch.row(source, r, silenced, state), bool(why), why, caller, by_patch)
        (review.findings if silenced is None else review.silenced).append(found)


async def _find_callers(
    reviews: list[PatchReview], tools: Path | None, root: Path, options: Options, report: ReviewReport
) -> list[tuple[PatchReview, str, units.Unit]]:
    """The callers of every changed function, one hop, from the work tree (``ReviewOptions.callers``): the review,
    the caller's file (now among the review's files) and its unit."""
    if tools is None:
        report.warnings.append("callers: a bare repository has no work tree to search; no callers audited")
        return []
    try:
        await asyncio.wait_for(symbols.index_for(tools).ready(), INDEX_SECONDS)
    except TimeoutError:
        report.warnings.append(f"callers: the symbol index was not built in {INDEX_SECONDS:g} s; some may be missing")
    snapshot = WorktreeSnapshot(tools, options.max_file_bytes)
    out = []
    for review in reviews:
        picked = [(path, unit) for path, file in review.files.items() for unit in file.touched()]
        changed = {(path, unit.name) for path, unit in picked}
        found: list[tuple[str, units.Unit]] = []
        for name in dict.fromkeys(u.name for _, u in picked if u.kind in ("function", "macro_body")):
            _, _, tags, _ = await asyncio.to_thread(sandbox.references, tools, name)
            callers = 0
            for tag in dict.fromkeys(t for t in tags if t is not None):
                file = review.files.get(tag.path) or _caller_file(snapshot, tag.path, root, options)
                unit = _unit_at(file, tag.line) if file is not None else None
                if unit is None or (tag.path, unit.name) in changed or (tag.path, unit) in found:
                    continue
                if callers == MAX_CALLERS:
                    report.warnings.append(f"callers of {name}: more than {MAX_CALLERS}; only the first audited")
                    break
                callers += 1
                review.files.setdefault(tag.path, file)
                found.append((tag.path, unit))
        out += [(review, path, unit) for path, unit in found]
    return out


def _unit_at(file: ReviewedFile, line: int) -> units.Unit | None:
    """The unit of a file holding its 1-based ``line``."""
    return next((u for u in file.source.units if u.start_line <= line - 1 <= u.end_line), None)


def _caller_file(snapshot: WorktreeSnapshot, path: str, root: Path, options: Options) -> ReviewedFile | None:
    """A work-tree file holding a caller: split, with no change of its own."""
    data = snapshot.read(path) if options.wants(path) else None
    if data is None:
        return None
    text = data.decode("utf-8", "surrogateescape")
    source = Source(root / path, path, text.split("\n"), units.split(text, options.kernel_macros))
    return ReviewedFile(source, path, (), frozenset())
