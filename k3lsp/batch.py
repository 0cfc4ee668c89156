"""`k3lsp audit PATH...`: the editor's audit outside the editor, for scripts, CI and code-scanning dashboards.

Same units, same cache, same client and the same filtering as the language server, so a finding seen in the
editor is the finding reported here and a tree audited once is not audited again. Three steps: collect the
files, audit their units into plain reports, then format the reports (text, JSON, SARIF in ``k3lsp.sarif``)
and map them to an exit status (0 clean, 1 findings at or above the threshold, 2 errors).

Several daemons (``--endpoint`` repeated) share one work queue of units (``k3lsp.spread``): each has its own
:class:`~k3lsp.auditor.Auditor` (one DEALER per daemon) and ``jobs`` workers pulling from the queue, so a faster
daemon simply takes more units. A daemon that fails puts its unit back and stops taking work; the others
finish the queue. Every unit's result is in the cache as soon as it finishes, so an interrupted run
(``stop`` set by SIGINT/SIGTERM) loses nothing already audited and a rerun audits only the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from lsprotocol import types as lsp

from k3lsp import pipeline, sanitize, suppress, units
from k3lsp.auditor import DEFAULT_CONCURRENCY, Auditor, BackendUnavailable, Counters, describe
from k3lsp.cache import ResultCache
from k3lsp.options import Options, admitted_files
from k3lsp.spread import Spread

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True)
class Span:
    """A file region as compilers and SARIF count it: 1-based lines and UTF-16 columns, end column exclusive.
    The same numbers as the editor's diagnostic range, plus one."""

    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def of(cls, rng: lsp.Range) -> Span:
        return cls(rng.start.line + 1, rng.start.character + 1, rng.end.line + 1, rng.end.character + 1)


@dataclass(frozen=True)
class Step:
    """One step of a finding's data-flow trace, in file coordinates."""

    span: Span
    note: str


@dataclass(frozen=True)
class Edit:
    """A suggested fix: replace the whole lines of ``span`` by ``replacement``."""

    span: Span
    replacement: str


@dataclass(frozen=True)
class Reported:
    """One finding as the batch tool reports it, in file coordinates."""

    path: str  # as the user named it: relative to the current directory when inside it
    uri: str  # relative to the report's root, `/` separated (SARIF's artifactLocation)
    line: int
    column: int
    end_line: int
    end_column: int
    severity: str
    cwe: int
    title: str
    message: str
    unit: str
    fingerprint: str
    confidence: float | None = None
    trace: tuple[Step, ...] = ()
    fix: Edit | None = None
    reasoning: str = ""  # why the model flagged it (its reasoning before the report)
    suppression: str | None = None  # silenced: pipeline.IN_SOURCE (a comment) or EXTERNAL (the baseline)


@dataclass
class BatchReport:
    root: Path
    files: int = 0
    units: int = 0
    findings: list[Reported] = field(default_factory=list)
    silenced: list[Reported] = field(default_factory=list)  # suppressed in the source or baselined: not findings
    errors: list[str] = field(default_factory=list)  # something was not audited: exit status 2
    warnings: list[str] = field(default_factory=list)  # worth knowing, nothing lost (a backend left mid-run)
    counters: Counters = field(default_factory=Counters)
    by_backend: dict[str, int] = field(default_factory=dict)  # endpoint -> units audited there (not cached), in order
    interrupted: bool = False

    def exit_status(self) -> int:
        if self.errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if self.findings else EXIT_CLEAN


@dataclass(frozen=True)
class Source:
    """A file to audit, read once: its units come from the same splitter as the editor's."""

    path: Path
    rel: str  # relative to the root: what the model and its tools see
    lines: list[str]
    units: tuple[units.Unit, ...]


@dataclass(frozen=True)
class Work:
    source: Source
    unit: units.Unit


# --- collecting ------------------------------------------------------------------------------------------


def audit_root(paths: Sequence[Path]) -> Path:
    """The directory the model's tools are confined to: the deepest folder holding every input."""
    dirs = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths]
    return Path(os.path.commonpath(dirs))


def collect(paths: Sequence[Path], root: Path, options: Options) -> tuple[list[Path], list[str]]:
    """Files to audit: named files as given, directories walked with include/exclude and maxFileBytes."""
    files: list[Path] = []
    errors: list[str] = []
    for path in paths:
        if path.is_file():
            files.append(path.resolve())
        elif path.is_dir():
            files += admitted_files(path.resolve(), root, options)
        else:
            errors.append(f"{path}: no such file or directory")
    return list(dict.fromkeys(files)), errors


def read_sources(files: Sequence[Path], root: Path) -> tuple[list[Source], list[str], list[str]]:
    """(sources, errors: files not read, notes: files split coarser than into functions)."""
    sources, errors, notes = [], [], []
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            errors.append(f"{rel}: {exc.strerror or exc}")
            continue
        split = units.split(text)
        note = units.fallback_note(split)
        if note is not None:
            notes.append(f"{rel}: {note}")
        sources.append(Source(path, rel, text.split("\n"), split))
    return sources, errors, notes


# --- auditing --------------------------------------------------------------------------------------------


async def audit_paths(
    paths: Sequence[Path],
    options: Options,
    cache: ResultCache | None = None,
    *,
    endpoints: Sequence[str] = (),
    jobs: int = DEFAULT_CONCURRENCY,
    stop: asyncio.Event | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
    allow_incomplete: bool = False,
) -> BatchReport:
    """Audit files and directories on one or more daemons (default: ``options.endpoint``).

    Never raises for a file or backend problem: they become report errors. ``jobs`` bounds the in-flight
    units per daemon; ``stop`` ends the run early (the units already finished are cached and reported);
    ``on_progress(done, total, note)`` is called as units finish and as the daemon reports a unit's prefill
    and decode (``note``, e.g. ``copy_msg: prefill 512/1,399 tokens``). A unit whose audit was cut short is an
    error (its findings may be missing), or with ``allow_incomplete`` a warning.
    """
    root = audit_root(paths)
    report = BatchReport(root)
    files, report.errors = collect(paths, root, options)
    report.files = len(files)
    sources, read_errors, report.warnings = read_sources(files, root)
    report.errors += read_errors
    baseline = suppress.Baseline.load(root)
    if baseline.error:
        report.errors.append(baseline.error)
    work = [Work(s, u) for s in sources for u in s.units]
    report.units = len(work)
    cache = cache or ResultCache()
    auditors = {
        e: Auditor(options.only(e), cache, client_name="k3lsp-audit", concurrency=jobs, on_state=None)
        for e in dict.fromkeys(endpoints or options.endpoints)
    }
    report.by_backend = dict.fromkeys(auditors, 0)
    run = _Run(report, options, baseline, work, on_progress, allow_incomplete)
    try:
        await run.execute(auditors, jobs, stop or asyncio.Event())
    finally:
        await asyncio.gather(*(a.close() for a in auditors.values()))
    report.counters = Counters.total(a.counters for a in auditors.values())
    for rows in (report.findings, report.silenced):
        rows.sort(key=lambda r: (r.path, r.line, r.cwe))
    return report


class _Run:
    """One batch audit: its units spread over the daemons (``k3lsp.spread``), and what they found."""

    def __init__(
        self,
        report: BatchReport,
        options: Options,
        baseline: suppress.Baseline,
        work: list[Work],
        on_progress: Callable[[int, int, str], None] | None,
        allow_incomplete: bool = False,
    ):
        self.report, self.options, self.baseline = report, options, baseline
        self.incomplete = report.warnings if allow_incomplete else report.errors  # where cut-short units go
        self.spread = Spread(work, self._audit, on_done=self._done, on_drop=self._drop)
        self.on_progress = on_progress

    async def execute(self, auditors: dict[str, Auditor], jobs: int, stop: asyncio.Event) -> None:
        spread = self.spread
        if spread.pending == 0:
            return
        self._progress("")
        await spread.run(auditors, jobs, stop)
        if spread.pending and stop.is_set():
            self.report.interrupted = True
            self.report.errors.append(
                f"interrupted: {spread.total - spread.pending} of {spread.total} units done; "
                "their results are cached, a rerun audits only the rest"
            )
        elif spread.pending:
            self.report.errors.append(f"{spread.pending} of {spread.total} units not audited: no backend left")

    def _done(self, item: Work, failure: Exception | None) -> None:
        if failure is not None:
            self.report.errors.append(f"{item.source.rel}: {item.unit.name}: {failure.__class__.__name__}: {failure}")
        self._progress("")

    def _progress(self, note: str) -> None:
        if self.on_progress is not None:
            self.on_progress(self.spread.total - self.spread.pending, self.spread.total, note)

    def _drop(self, endpoint: str, why: BackendUnavailable, live: set[str]) -> None:
        if live:
            self.report.warnings.append(f"{why}; its units go to {', '.join(sorted(live))}")
        else:
            self.report.errors.append(str(why))

    async def _audit(self, endpoint: str, auditor: Auditor, item: Work) -> None:
        source, unit = item.source, item.unit
        got = False
        stream = auditor.audit(
            self.report.root,
            source.rel,
            [unit],
            priority="background",
            on_progress=lambda u, msg: self._progress(describe(u, msg)),
        )
        async with contextlib.aclosing(stream) as results:
            async for result in results:
                got = True
                if result.refusal is not None:  # remembered by the auditor: never sent again
                    self.report.errors.append(f"{source.rel}: {unit.name}: too long to audit: {result.refusal}")
                    continue
                if not result.cached:
                    self.report.by_backend[endpoint] += 1
                if result.over_limit:
                    self.report.warnings.append(
                        f"{source.rel}: {unit.name}: {result.over_limit} findings beyond the bounds of one unit "
                        "were dropped (k3lsp.bounds)"
                    )
                if result.cut_short is not None:  # not a clean pass: its findings may be missing
                    self.incomplete.append(
                        f"{source.rel}: {unit.name}: the audit was cut short ({result.cut_short}), findings may be "
                        "missing; not cached, a rerun audits it again"
                    )
                rows = reported(source, unit, result.findings, self.options.min_severity, self.baseline)
                self.report.findings += [r for r in rows if r.suppression is None]
                self.report.silenced += [r for r in rows if r.suppression is not None]
        if not got:
            self.report.errors.append(f"{source.rel}: {unit.name}: the backend at {endpoint} could not audit it")


def _display(path: Path) -> str:
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def reported(
    source: Source, unit: units.Unit, raws: list[dict], min_severity: str, baseline: suppress.Baseline
) -> list[Reported]:
    """The report rows for one unit's results: what the findings pipeline reports, in file coordinates, and what
    it silenced (``suppression`` set)."""
    return [_row(source, r, why) for r, why in pipeline.screened(unit, raws, source.lines, min_severity, baseline)]


def _row(source: Source, r: pipeline.Reportable, suppression: str | None) -> Reported:
    f, span, edit = r.finding, Span.of(r.range), r.fix
    trace = tuple(Step(Span.of(rng), note) for rng, note in r.trace)
    fix = None if edit is None else Edit(Span.of(edit.range), edit.new_text)
    return Reported(
        _display(source.path), source.rel, span.line, span.column, span.end_line, span.end_column, f.severity,
        f.cwe, f.title, f.message, r.unit.name, r.fingerprint, f.confidence, trace, fix, f.reasoning, suppression,
    )  # fmt: skip


# --- output ----------------------------------------------------------------------------------------------


def stats(report: BatchReport) -> dict:
    c = report.counters
    return {
        "files": report.files,
        "units": report.units,
        "audited": c.audited,
        "cached": c.cached,
        "failed": c.failed,
        "findings": len(report.findings),
        "suppressed": sum(r.suppression == pipeline.IN_SOURCE for r in report.silenced),
        "baselined": sum(r.suppression == pipeline.EXTERNAL for r in report.silenced),
        "tokens": c.tokens,
        "incomplete": c.incomplete,
    }


def print_problems(report: BatchReport, err: TextIO = sys.stderr) -> None:
    """Errors and warnings on stderr, whatever the output format (they may quote the daemon: sanitised)."""
    for warning in report.warnings:
        print(sanitize.line(f"k3lsp audit: warning: {warning}"), file=err)
    for error in report.errors:
        print(sanitize.line(f"k3lsp audit: error: {error}"), file=err)


def print_text(report: BatchReport, out: TextIO = sys.stdout) -> None:
    """`path:line:col: severity CWE-n title`, like a compiler, then one stats line. The path comes from the
    audited tree and the title from the model: each line is sanitised for the terminal."""
    for r in report.findings:
        print(sanitize.line(f"{r.path}:{r.line}:{r.column}: {r.severity} CWE-{r.cwe} {r.title}"), file=out)
    line = "k3lsp audit: " + ", ".join(f"{v} {k}" for k, v in stats(report).items())
    if len(report.by_backend) > 1:
        line += "; audited on " + ", ".join(f"{e}: {n}" for e, n in report.by_backend.items())
    print(sanitize.line(line), file=out)


def print_json(report: BatchReport, out: TextIO = sys.stdout) -> None:
    body = {
        "root": str(report.root),
        "findings": [asdict(r) for r in report.findings],
        "errors": report.errors,
        "warnings": report.warnings,
        "stats": stats(report) | {"backends": report.by_backend, "interrupted": report.interrupted},
    }
    json.dump(body, out, indent=2)
    out.write("\n")
