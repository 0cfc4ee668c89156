"""The audit service: the one way from a file's text to its screened findings, below every front end.

In the role clangd's ClangdServer plays under ClangdLSPServer: the language server (an editor's save, the workspace
audit), ``k3lsp audit``, ``k3lsp review`` and ``k3lsp eval`` each hand it documents and get back events, so the
same settings give the same findings whichever front end asked. For each document it owns, in order:

1. its **text** (given by the front end, an editor buffer; else read from ``path``), refused past ``maxFileBytes``;
2. its **units** (``k3lsp.units.split``, through the front end's ``split``: the language server splits in a process
   of its own);
3. the **witnesses**' alerts (the ``witnesses`` setting, ``k3lsp.witnesses.analyze``, off the event loop, cached by
   content), each unit sent with the alerts on its lines;
4. its **scope**: the units to audit. A document's ``units_at`` (re-audit one function, a caller) picks the units
   holding those lines; a ``change`` (a patch under review) picks the units it added or modified lines in and sends
   each with its :class:`~k3lsp.core.run.Changes`; otherwise ``scope: changed`` picks the units the work tree
   changed since ``baseRef`` (``k3lsp.core.scope``), and ``scope: all`` every unit;
5. the **targets**, the same unit of two documents audited once (a review's patches that leave a function alike),
   each unit with its state under the ``kconfig`` setting (``k3lsp.core.reachability``: built code first; with
   ``Job.only_built`` the units not built are left out, and counted with their reasons in ``Outcome.skipped``);
6. the **run** on the daemon pool (``k3lsp.core.pool``: cache, priority, spread, retries, bounds), one per priority;
7. the findings **screened** (``k3lsp.findings.pipeline``: acceptance, ``minSeverity``, ``k3-audit: ignore``, the
   baseline, refuted unless ``showRefuted``; with ``scope: changed``, only those on changed lines).

How a front end calls it::

    service = AuditService(pool, split=splitter.split)      # one per process; the options are ``pool.options``
    docs = [Document.of(path, root, text=editor_text)]      # or Document(path, root, relpath, text=...)
    outcome = await service.audit(docs, listener, Job(priority=Priority.INTERACTIVE, baseline=baseline))
    outcome.summary, outcome.files[docs[0]]                 # the runs' Summary; each document's FileOutcome

``listener(event)`` is called for each event, in this order per document, and may be a coroutine function (it is
awaited: the job waits for the front end to take each event). The events, neutral types only (no LSP here):

- :class:`Prepared` once per document that can be audited: its units, what was picked to audit, the witnesses'
  report (alerts to show at once, the analyzers' problems), the scope (``changed``), the splitter's fallback note;
- :class:`LookedUp` once per run, after the cache answered: how many units were hits and how many go to a daemon
  (a front end shows progress only for real work);
- :class:`UnitDone` per unit of the document with a result, cached ones first (``result.cached``): the raw result
  (what the editor stores) and its findings screened (what a report shows), each with how it is silenced; a unit
  two documents share is audited once and told to each, ``first`` on the first (count results there);
- :class:`Progress` after each run's lookup, as the daemons report a unit's prefill and decode, and after each
  unit: units done and in all over the job, and the daemon's word (the one progress adapter: a front end shows it);
- :class:`FileDone` once per document, when every unit picked has an outcome (result, failure, or left without a
  daemon), or at once when it could not be audited (``error``: unreadable, too large).

Cancelling: cancel the task awaiting :meth:`AuditService.audit`. Its runs are left, which withdraws their work
from the daemons (queued units dropped, running ones cancelled there); what finished is already cached. A batch
front end that stops on a signal wraps the call in ``k3lsp.core.tasks.until_stopped`` and keeps what its listener
was told. A listener that raises ends the job the same way, its exception raised from ``audit``.

A job prepares all its documents (a few at a time: witnesses are child processes), then runs their units; a front
end with tens of thousands of files (the workspace audit) calls the service for a few files at a time, so the
daemons start at once and the server never holds every unit.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.core import scope
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.reachability import Reachability, Skipped, rank
from k3lsp.core.run import Changes, Failure, Noted, Summary, Target, UnitResult, describe
from k3lsp.core.splits import SplitStore
from k3lsp.findings import pipeline, suppress
from k3lsp.kbuild.config import ConfigError
from k3lsp.kbuild.state import Kind, State
from k3lsp.units import split as units
from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit
from k3lsp.wire.protocol import Priority
from k3lsp.witnesses import shown
from k3lsp.witnesses.alert import Alert
from k3lsp.witnesses.analyze import Report, analyze

Split = Callable[[str, Macros], Awaitable[tuple[Unit, ...]]]
Screened = tuple[pipeline.Reportable, str | None]  # a finding and how it is silenced (None: reported)


async def split_here(text: str, macros: Macros) -> tuple[Unit, ...]:
    """Split in this process (a command-line front end has no event loop to keep free)."""
    return units.split(text, macros)


@dataclass(frozen=True)
class ChangeSet:
    """What a change under review did to a document: the file lines it added or modified (1-based) and the file's
    text before it ("" when the change adds the file)."""

    lines: frozenset[int]
    before: str = ""


@dataclass(frozen=True, eq=False)
class Document:
    """One file of a job. ``path`` is the file on disk (witnesses analyze it, scope diffs it); ``root`` confines
    the model's tools and the analyzers (None: a file outside every workspace, which gets none); ``relpath`` is
    the path the model and its tools see. ``text``: the front end's (an editor buffer), else read from ``path``.
    ``units_at``: audit only the units holding these 0-based file lines. ``priority``: the job's unless set.
    ``units``: the text's units when the front end has split it already with the settings' ``kernelMacros``
    (``k3lsp audit`` splits every file to say what the run costs before it starts): not split again.
    ``alerts``: the front end's own questions on lines of the file (a variant search's "is this the same bug?"),
    each sent with the unit it falls in beside the witnesses' alerts.
    Compared by identity: a front end finds its own document in the events."""

    path: Path
    root: Path | None
    relpath: str
    text: str | None = None
    units_at: frozenset[int] | None = None
    change: ChangeSet | None = None
    priority: Priority | None = None
    units: tuple[Unit, ...] | None = None
    alerts: tuple[Alert, ...] = ()

    @classmethod
    def of(cls, path: Path, root: Path | None, **kw) -> Document:
        """A document named by its path: relative to ``root`` when inside it, else its name, with no root."""
        inside = root is not None and path.is_relative_to(root)
        return cls(path, root if inside else None, path.relative_to(root).as_posix() if inside else path.name, **kw)

    def target(self, unit: Unit, alerts: Sequence[Alert] = (), changes: Changes | None = None) -> Target:
        """One of its units as a daemon is asked about it: the one place a front end's document becomes a
        :class:`~k3lsp.core.run.Target` (the model's tools rooted at ``root``, shown ``relpath``)."""
        return Target(self.root, self.relpath, unit, alerts=tuple(alerts), changes=changes)


@dataclass(frozen=True)
class Job:
    """How one job runs, beyond the settings: ``force`` skips the cache (a re-audit), ``fresh`` asks the daemons
    not to answer from their result stores either (an eval measures the model), ``baseline`` the accepted findings
    screened out (None: none), ``cached_only`` asks no daemon (an opened file shows what the cache knows),
    ``bounded`` refuses a file over ``maxFileBytes`` (``k3lsp audit`` audits a file named on its command line
    whatever its size, having said what it costs: ``k3lsp.cli.admission``), ``only_built`` leaves out the units
    the ``kconfig`` setting's configuration does not build (``--only-built``; a workspace audit with ``unbuilt:
    hide``), counted in the outcome's ``skipped``; ``scope``, when set, is this job's in place of the ``scope``
    setting (a workspace audit the person narrowed to changed code)."""

    priority: Priority = Priority.INTERACTIVE
    force: bool = False
    fresh: bool = False
    baseline: suppress.Baseline | None = None
    cached_only: bool = False
    bounded: bool = True  # refuse a document over maxFileBytes; False: the front end admitted its files itself
    only_built: bool = False  # leave out the units the kconfig does not build (k3lsp.core.reachability)
    scope: str | None = None  # None: the scope setting's


@dataclass(frozen=True)
class Prepared:
    doc: Document
    text: str
    units: tuple[Unit, ...]  # every unit of the file
    targets: tuple[Target, ...]  # what is audited, with its alerts and change
    witnessed: Report | None  # None: no witnesses configured
    changed: scope.Changed | None  # scope changed: the lines that count (None: every line)
    note: str | None = None  # the splitter fell back to line windows: say so
    states: tuple[State, ...] | None = None  # each unit's under the kconfig setting (None: no kconfig, or a bad one)
    unbuilt: tuple[Unit, ...] = ()  # picked but left out: the job audits only built code, and these are not
    kconfig_problem: str | None = None  # the kconfig setting cannot tell what is built here, and why

    def state(self, unit: Unit) -> State | None:
        """A unit's state under the kconfig setting (None without one)."""
        return self._by_unit.get(unit)

    @functools.cached_property
    def lines(self) -> list[str]:
        """The text's lines, split once for every unit's result (a 0.9 MB file's 147 cached units split it 147
        times, most of a second before its cached findings showed)."""
        return self.text.split("\n")

    @functools.cached_property
    def _by_unit(self) -> dict[Unit, State]:
        return dict(zip(self.units, self.states, strict=True)) if self.states is not None else {}

    def notes(self) -> list[str]:
        """What the person is told about this file beside its findings, one sentence each (the same sentence for
        the same reason, so a front end says each once): a kconfig that cannot tell what is built, a witness
        that could not run, alerts left out."""
        out = [self.kconfig_problem] if self.kconfig_problem is not None else []
        if self.witnessed is None:
            return out
        out += [f"witness {r.tool}: {r.problem}" for r in self.witnessed.runs if r.problem is not None]
        if self.witnessed.outside:
            out.append(
                f"witnesses: {self.witnessed.outside} alert(s) on {self.doc.relpath} left out: they named a place "
                "outside the workspace, which the analyzers may not read (docs/witnesses.md)"
            )
        return out


@dataclass(frozen=True)
class LookedUp:
    """One run's cache answer: a front end shows progress only for the misses, the real work."""

    priority: Priority
    hits: int
    misses: int


@dataclass(frozen=True)
class UnitDone:
    """One unit's result for one document: raw (what an editor keeps, to screen again as the text changes) and
    screened as the settings say (what a report shows)."""

    doc: Document
    result: UnitResult
    findings: tuple[Screened, ...]
    first: bool = True  # the first document told of this result (a unit two documents share): count it here
    state: State | None = None  # the unit's under the kconfig setting (None: no kconfig)


@dataclass(frozen=True)
class Progress:
    done: int  # units with a result, over the job
    total: int  # units picked, over the job
    note: str  # the daemon's latest word on a unit (``copy_msg: prefill 512/1,399 tokens``), or ""


@dataclass
class FileOutcome:
    """What one document came to."""

    units: int = 0  # units picked to audit
    done: int = 0  # ... with a result (cached, audited or refused)
    incomplete: int = 0  # ... cut short by the daemon
    failed: list[Failure] = field(default_factory=list)
    left: list[Target] = field(default_factory=list)  # no daemon could take them
    error: str | None = None  # not audited at all: unreadable, too large

    @property
    def complete(self) -> bool:
        """Every unit picked was looked at."""
        return self.error is None and not self.failed and not self.left


@dataclass(frozen=True)
class FileDone:
    doc: Document
    outcome: FileOutcome


Event = Prepared | LookedUp | UnitDone | Progress | FileDone
Listener = Callable[[Event], Awaitable[None] | None]


@dataclass
class Outcome:
    """What a job came to: its runs' summary, merged, and each document's outcome."""

    summary: Summary
    files: dict[Document, FileOutcome]
    skipped: Skipped | None = None  # with a kconfig: the units it does not build, left out or not, and why


PREPARED_AT_ONCE = os.cpu_count() or 1  # documents read, split and analyzed at once (analyzers are processes)


class AuditService:
    """The audit service of one process: its pool (and so its settings, ``pool.options``) and how it splits."""

    def __init__(self, pool: Pool, split: Split = split_here):
        self.pool, self.split = pool, split
        self.reachability = Reachability()  # the kconfig setting's readings, kept across jobs
        self.splits = SplitStore.beside(pool.cache.path)  # beside the result cache: the user's code, kept private

    @property
    def options(self) -> Options:
        return self.pool.options

    async def audit(self, docs: Sequence[Document], listener: Listener, job: Job = Job()) -> Outcome:
        """Audit ``docs``, telling ``listener`` as it goes (see the module docstring)."""
        return await _Audit(self, list(docs), listener, job).run()

    async def keep(self, prepared: Prepared) -> None:
        """Keep the split of a file an audit found something in: opened next in an editor, unchanged, its cached
        findings show without waiting for the splitter, whichever front end audited it (``k3lsp.core.splits``)."""
        await asyncio.to_thread(self.splits.put, prepared.text, self.options.kernel_macros, prepared.units)

    def explain(self, doc: Document, unit: Unit, finding: dict) -> AsyncIterator[str]:
        """The model's explanation of a finding in one of the document's units, streamed. Raises
        DaemonUnavailable or DaemonError (``Pool.explain``)."""
        return self.pool.explain(doc.target(unit), finding)


class _Audit:
    """One job: its documents, the owners of each target, the counts."""

    def __init__(self, service: AuditService, docs: list[Document], listener: Listener, job: Job):
        self.service, self.docs, self.listener, self.job = service, docs, listener, job
        self.options = service.options
        self.files = {d: FileOutcome() for d in docs}
        self.prepared: dict[Document, Prepared] = {}
        self.owners: dict[Target, list[Document]] = {}
        self.pending: dict[Document, int] = {}
        self.found: set[Document] = set()  # those with a finding or a refusal to show: their split is kept
        self.done = 0
        self.skipped = Skipped(self.options.kconfig, job.only_built) if self.options.kconfig else None

    async def tell(self, event: Event) -> None:
        told = self.listener(event)
        if inspect.isawaitable(told):
            await told

    async def run(self) -> Outcome:
        gate = asyncio.Semaphore(PREPARED_AT_ONCE)

        async def one(doc: Document) -> Prepared | str:
            async with gate:
                return await self.prepare(doc)

        for doc, ready in zip(self.docs, await asyncio.gather(*(one(d) for d in self.docs)), strict=True):
            if isinstance(ready, str):
                self.files[doc].error = ready
                await self.tell(FileDone(doc, self.files[doc]))
                continue
            self.prepared[doc] = ready
            if self.skipped is not None and ready.states is not None:
                self.skipped.add(doc.relpath, map(ready.state, (*(t.unit for t in ready.targets), *ready.unbuilt)))
            await self.tell(ready)
            self.files[doc].units = len(ready.targets)
            self.pending[doc] = len(ready.targets)
            for t in ready.targets:
                self.owners.setdefault(t, []).append(doc)
        for doc in [d for d, n in self.pending.items() if n == 0]:  # nothing picked: final at once
            await self.tell(FileDone(doc, self.files[doc]))
        by_priority: dict[Priority, list[Target]] = {}
        for target, docs in sorted(self.owners.items(), key=lambda item: rank(self.state(*item))):  # built first
            by_priority.setdefault(docs[0].priority or self.job.priority, []).append(target)
        summaries = await asyncio.gather(*(self.audit(p, ts) for p, ts in by_priority.items()))
        return Outcome(_merged(summaries), self.files, self.skipped)

    def state(self, target: Target, docs: list[Document]) -> State | None:
        """A target's state under the kconfig setting, as its first document has it."""
        return self.prepared[docs[0]].state(target.unit)

    async def prepare(self, doc: Document) -> Prepared | str:
        """The document's units, alerts, scope and targets; or why it cannot be audited."""
        o = self.options
        text = doc.text
        if text is None:
            try:
                text = await asyncio.to_thread(doc.path.read_text, encoding="utf-8", errors="replace")
            except OSError as exc:
                return f"cannot read {doc.relpath}: {exc.strerror or exc}"
        if self.job.bounded and len(text.encode("utf-8", "surrogatepass")) > o.max_file_bytes:
            return f"{doc.relpath} is larger than maxFileBytes ({o.max_file_bytes}); not audited"
        split = doc.units if doc.units is not None else await self.service.split(text, o.kernel_macros)
        report = None
        if o.witnesses:
            cache = self.service.pool.cache
            report = await asyncio.to_thread(analyze, doc.path, text, doc.root, o.witnesses, cache)
        alerts = [*doc.alerts, *(report.alerts if report is not None else ())]
        picked, changes = await self.picked(doc, text, split)
        targets = tuple(doc.target(u, shown.for_unit(alerts, u), changes.get(u.name)) for u in picked)
        changed = await self.scoped(doc, text) if doc.change is None and doc.units_at is None else None
        if changed is not None:
            targets = tuple(t for t in targets if changed.touches(t.unit))
        states, problem = await self.states(doc, text, split)
        unbuilt: tuple[Unit, ...] = ()
        if self.job.only_built and states is not None:
            out = {u for u, s in zip(split, states, strict=True) if s.kind is Kind.NOT_BUILT}
            unbuilt = tuple(t.unit for t in targets if t.unit in out)
            targets = tuple(t for t in targets if t.unit not in out)
        return Prepared(
            doc, text, split, targets, report, changed, units.fallback_note(split), states, unbuilt, problem
        )

    async def states(
        self, doc: Document, text: str, split: tuple[Unit, ...]
    ) -> tuple[tuple[State, ...] | None, str | None]:
        """Each unit's state under the kconfig setting (None without one), or why the setting cannot tell."""
        kconfig = self.options.kconfig
        if not kconfig:
            return None, None
        try:
            return await asyncio.to_thread(self.service.reachability.states, doc.path, text, split, kconfig), None
        except ConfigError as error:
            return None, str(error)

    async def picked(self, doc: Document, text: str, split: tuple[Unit, ...]) -> tuple[list[Unit], dict[str, Changes]]:
        """The units the document's own selection picks (all without one), and the change of each under review."""
        if doc.units_at is not None:
            return [u for u in split if any(u.start_line <= n <= u.end_line for n in doc.units_at)], {}
        if doc.change is None:
            return list(split), {}
        before = await self.service.split(doc.change.before, self.options.kernel_macros)
        changed = changed_units(split, text.split("\n"), doc.change.lines, before)
        return [u for u, _ in changed], {u.name: c for u, c in changed}

    async def scoped(self, doc: Document, text: str) -> scope.Changed | None:
        o = self.options
        if (self.job.scope or o.scope) != scope.CHANGED:
            return None
        return await asyncio.to_thread(scope.changed, doc.path, text, o.base_ref, o.max_file_bytes)

    async def audit(self, priority: Priority, targets: list[Target]) -> Summary:
        """One run of the pool over these targets; each outcome told to the documents that own it."""
        pool, job, total = self.service.pool, self.job, len(self.owners)
        if job.cached_only:
            hits = pool.cached(targets, priority)
            await self.tell(LookedUp(priority, len(hits), len(targets) - len(hits)))
            for hit in hits:
                await self.result(hit)
            found = {hit.target for hit in hits}
            for target in targets:
                if target not in found:  # not asked for: the file is final without it
                    await self.ended(target, None)
            return Summary(units=len(targets), cached=len(hits))
        run = pool.audit(targets, priority=priority, force=job.force, fresh=job.fresh)
        for hit in await run.lookup():
            await self.result(hit)
        misses = len(run.misses or ())
        await self.tell(LookedUp(priority, len(targets) - misses, misses))
        await self.tell(Progress(self.done, total, ""))  # the cached ones count as done
        async for outcome in run.outcomes():
            if isinstance(outcome, Noted):
                await self.tell(Progress(self.done, total, describe(outcome.unit, outcome.message)))
            elif isinstance(outcome, UnitResult):
                await self.result(outcome, progress=True)
            else:
                await self.ended(outcome.target if isinstance(outcome, Failure) else outcome, outcome)
        return run.summary

    async def result(self, result: UnitResult, progress: bool = False) -> None:
        """A unit's result told to each document that owns it (and, from a daemon, as progress), then counted."""
        self.done += 1
        for n, doc in enumerate(self.owners[result.target]):
            ready = self.prepared[doc]
            if result.findings or result.refusal is not None:
                self.found.add(doc)
            state = ready.state(result.target.unit)
            await self.tell(UnitDone(doc, result, self.screened(ready, result), first=n == 0, state=state))
        if progress:
            await self.tell(Progress(self.done, len(self.owners), ""))
        await self.ended(result.target, result)

    def screened(self, prepared: Prepared, result: UnitResult) -> tuple[Screened, ...]:
        """The unit's findings through the findings pipeline, the scope's lines last."""
        if result.refusal is not None:
            return ()
        o, changed = self.options, prepared.changed
        found = pipeline.screened(
            result.unit, result.findings, prepared.lines, o.min_severity, self.job.baseline, o.show_refuted
        )
        return tuple(
            (r, why) for r, why in found if changed is None or changed.meets(r.range.start.line, r.range.end.line)
        )

    async def ended(self, target: Target, outcome: UnitResult | Failure | Target | None) -> None:
        """A target has its outcome (a result, a failure, left; None: not asked for): noted in the file outcome
        of each document that owns it; a document with no target pending is final."""
        for doc in self.owners[target]:
            file = self.files[doc]
            if isinstance(outcome, UnitResult):
                file.done += 1
                file.incomplete += outcome.cut_short is not None
            elif isinstance(outcome, Failure):
                file.failed.append(outcome)
            elif outcome is not None:
                file.left.append(outcome)
            self.pending[doc] -= 1
            if self.pending[doc] == 0:
                if doc in self.found:
                    await self.service.keep(self.prepared[doc])
                await self.tell(FileDone(doc, file))


def changed_units(
    split: Sequence[Unit], lines: list[str], changed: frozenset[int], before: Sequence[Unit]
) -> list[tuple[Unit, Changes]]:
    """The units of a file holding a line a change added or modified (``changed``: 1-based file lines of
    ``lines``; a line of blanks alone does not count), each with its change: those lines in the unit's own
    numbering and the function of the same name ``before`` it ("" for a new one). What a review audits."""
    named = {u.name: u for u in before}
    out = []
    for unit in split:
        mine = tuple(n - unit.start_line for n in sorted(changed) if unit.start_line < n <= unit.end_line + 1)
        if any(lines[unit.file_line(k)].strip() for k in mine):
            preimage = named.get(unit.name)
            out.append((unit, Changes(mine, preimage.text if preimage else "")))
    return out


def _merged(summaries: Sequence[Summary]) -> Summary:
    """One summary of a job's runs (one per priority)."""
    out = Summary()
    for s in summaries:
        out.units += s.units
        out.cached += s.cached
        out.audited += s.audited
        out.incomplete += s.incomplete
        out.refused += s.refused
        out.failed += s.failed
        out.over_limit += s.over_limit
        out.left += s.left
        out.unavailable = s.unavailable or out.unavailable
        out.dropped += [d for d in s.dropped if d not in out.dropped]
    return out
