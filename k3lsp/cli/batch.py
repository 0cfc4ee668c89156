"""`k3lsp audit PATH...`: the editor's audit outside the editor, for scripts, CI and code-scanning dashboards.

Same units, same cache, the same audit core and the same filtering as the language server, so a finding
seen in the editor is the finding reported here and a tree audited once is not audited again. Three steps:
collect the files (``k3lsp.cli.admission``, which says what it skipped and what a run will cost before it starts),
audit their units into plain reports, then format the reports (text, with ``k3lsp.cli.findings_text`` on a terminal;
JSON; SARIF in ``k3lsp.cli.sarif``) and map them to an exit status (0 clean, 1 findings at or above the threshold, 2
errors).

The whole tree is one run of the audit core (``k3lsp.core.pool``) at background priority: several daemons
(``--endpoint`` repeated) take units from its one queue, ``jobs`` at a time each, so a faster daemon simply
takes more; a daemon that fails leaves its units to the others. Every unit's result is in the cache as soon
as it finishes, so an interrupted run (``stop`` set by SIGINT/SIGTERM) loses nothing already audited and a
rerun audits only the rest.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TextIO

from k3lsp.cli import findings_text
from k3lsp.cli.admission import Admitted, Source, admit, audit_root, shown
from k3lsp.cli.admission import read_sources as read_sources  # its tests read a file as the batch tool does
from k3lsp.core import service
from k3lsp.core.options import Options
from k3lsp.core.pool import DEFAULT_SLOTS, Pool
from k3lsp.core.run import Counters
from k3lsp.core.tally import ProgressLine, Tally
from k3lsp.findings import pipeline, suppress
from k3lsp.findings.report import Edit, Reported, Span, Step
from k3lsp.kbuild.state import State
from k3lsp.units import split as units
from k3lsp.wire import sanitize
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import SEVERITIES, Priority

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


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


# --- auditing --------------------------------------------------------------------------------------------


async def audit_paths(
    paths: Sequence[Path],
    options: Options,
    cache: ResultCache | None = None,
    *,
    endpoints: Sequence[str] = (),
    jobs: int = DEFAULT_SLOTS,
    stop: asyncio.Event | None = None,
    on_progress: ProgressLine | None = None,
    allow_incomplete: bool = False,
    on_admitted: Callable[[Admitted], None] | None = None,
) -> BatchReport:
    """Audit files and directories on one or more daemons (default: ``options.endpoint``).

    Never raises for a file or daemon problem: they become report errors. ``jobs`` bounds the in-flight units
    per daemon; ``stop`` ends the run early (the units already finished are cached and reported);
    ``on_progress(done, total, note)`` is called as units finish and as a daemon reports a unit's prefill and
    decode (``note``, e.g. ``copy_msg: prefill 512/1,399 tokens``). A unit whose audit was cut short is an
    error (its findings may be missing), or with ``allow_incomplete`` a warning. ``on_admitted`` is told which
    files were taken, and what was said about the paths (``k3lsp.cli.admission``), before any daemon is contacted.
    With the ``kconfig`` setting each row says its unit's state, built code is audited first and the report
    says how many units are not built and why; ``unbuilt: hide`` (``--only-built``) leaves them out
    (``k3lsp.core.reachability``). A kconfig that cannot say what the tree builds is an error, and nothing is
    audited.
    """
    cache_said: list[str] = []  # an unusable K3LSP_CACHE_DIR or size: a warning of the report, not a log line
    cache = cache or ResultCache(on_problem=cache_said.append)
    root = audit_root(paths)
    if endpoints:
        first, *others = dict.fromkeys(endpoints)
        options = replace(options, endpoint=first, other_endpoints=tuple(others))
    pool = Pool(options, cache, client_name="k3lsp-audit", slots=jobs)  # no connection before the first unit
    audits = service.AuditService(pool)
    problem = audits.reachability.problem(root, options.kconfig) if options.kconfig else None
    admitted = admit(paths, root, options, _built(audits, options) if problem is None else None)
    if problem is not None:
        admitted.errors.append(problem)
        admitted.sources = []
    admitted.warnings[:0] = cache_said
    if on_admitted is not None:
        on_admitted(admitted)
    sources = admitted.sources
    report = BatchReport(root, len(sources), errors=list(admitted.errors), warnings=list(admitted.warnings))
    baseline = suppress.Baseline.load(root)
    if baseline.error:
        report.errors.append(baseline.error)
    report.by_backend = dict.fromkeys(options.endpoints, 0)
    try:
        await _run(audits, report, sources, baseline, stop or asyncio.Event(), on_progress, allow_incomplete)
    finally:
        await pool.close()
    report.counters = pool.counters
    for rows in (report.findings, report.silenced):
        rows.sort(key=lambda r: (r.path, r.line, r.cwe))
    return report


def _built(audits: service.AuditService, options: Options) -> Callable[[Source], Sequence[units.Unit]] | None:
    """With ``--only-built``, the units of a file the run sends, for admission's cost estimate (None: all)."""
    if not options.only_built():
        return None
    return lambda s: audits.reachability.built(s.path, "\n".join(s.lines), s.units, options.kconfig)


async def _run(
    audits: service.AuditService,
    report: BatchReport,
    sources: list[Source],
    baseline: suppress.Baseline,
    stop: asyncio.Event,
    on_progress: ProgressLine | None,
    allow_incomplete: bool,
) -> None:
    """The tree's files as one background job of the audit service, each unit's rows added as it finishes."""
    docs = {service.Document(s.path, report.root, s.rel, "\n".join(s.lines), units=s.units): s for s in sources}
    tally = Tally(report, on_progress)

    def told(event: service.Event) -> None:
        tally(event)
        if isinstance(event, service.UnitDone):
            result = event.result
            if result.endpoint is not None:
                report.by_backend[result.endpoint] = report.by_backend.get(result.endpoint, 0) + 1
            rows = [row(docs[event.doc], r, why, event.state) for r, why in event.findings]
            report.findings += [r for r in rows if r.suppression is None]
            report.silenced += [r for r in rows if r.suppression is not None]

    only_built = audits.options.only_built()
    job = service.Job(Priority.BACKGROUND, baseline=baseline, bounded=False, only_built=only_built)  # admission said
    try:
        await tally.run(audits, list(docs), told, job, stop, allow_incomplete=allow_incomplete, rerun="audits")
    finally:
        report.units = tally.units


def reported(
    source: Source, unit: units.Unit, raws: list[dict], min_severity: str, baseline: suppress.Baseline
) -> list[Reported]:
    """The report rows for one unit's results: what the findings pipeline reports, in file coordinates, and what
    it silenced (``suppression`` set)."""
    return [row(source, r, why) for r, why in pipeline.screened(unit, raws, source.lines, min_severity, baseline)]


def row(source: Source, r: pipeline.Reportable, suppression: str | None, state: State | None = None) -> Reported:
    """One finding the pipeline passed (``suppression``: or silenced) as a report row, in file coordinates, with
    its unit's ``state`` under the kconfig setting."""
    f, span, edit = r.finding, Span.of(r.range), r.fix
    trace = tuple(Step(Span.of(rng), note) for rng, note in r.trace)
    fix = None if edit is None else Edit(Span.of(edit.range), edit.new_text)
    return Reported(
        shown(source.path), source.rel, span.line, span.column, span.end_line, span.end_column, f.severity,
        f.cwe, f.title, f.message, r.unit.name, r.fingerprint, f.confidence, trace, fix, f.reasoning, suppression,
        f.verdict.verdict if f.verdict else None, f.verdict.reason if f.verdict else "",
        state.kind.value if state else None, state.reason if state else "",
    )  # fmt: skip


# --- output ----------------------------------------------------------------------------------------------


SILENCED = {"suppressed": pipeline.IN_SOURCE, "baselined": pipeline.EXTERNAL, "refuted": pipeline.REFUTED}


def stats(report: BatchReport) -> dict:
    """The run's counts, in the order the stats line prints them."""
    c = report.counters
    silenced = Counter(r.suppression for r in report.silenced)
    return {
        "files": report.files,
        "units": report.units,
        "audited": c.audited,
        "cached": c.cached,
        "failed": c.failed,
        "findings": len(report.findings),
        **{name: silenced[kind] for name, kind in SILENCED.items()},
        "tokens": c.tokens,
        "incomplete": c.incomplete,
    }


def print_problems(report: BatchReport | Admitted, err: TextIO = sys.stderr, said: Admitted | None = None) -> None:
    """Errors and warnings on stderr, whatever the output format (they may quote the daemon, or name a file of
    the tree: sanitised). ``said``: the admission's, printed before the run, are not printed again."""
    for warning in report.warnings[len(said.warnings) if said else 0 :]:
        print(sanitize.line(f"k3lsp audit: warning: {warning}"), file=err)
    for error in report.errors[len(said.errors) if said else 0 :]:
        print(sanitize.line(f"k3lsp audit: error: {error}"), file=err)


def print_text(report: BatchReport, out: TextIO = sys.stdout, detailed: bool | None = None) -> None:
    """`path:line:col: severity CWE-n title` per finding, like a compiler, then one stats line. ``detailed``
    (default: whether ``out`` is a terminal) adds what a compiler shows under its location line: the message, the
    source line with a caret, the trace and the fix (``k3lsp.cli.findings_text``); piped, scripts get the one line."""
    if detailed is None:
        detailed = out.isatty()
    source = functools.cache(_lines_of)
    for r in report.findings:
        for line in findings_text.detailed(r, source) if detailed else [findings_text.headline(r)]:
            print(line, file=out)
    print(summary_line(report), file=out)


def summary_line(report: BatchReport) -> str:
    """``k3lsp audit: F files, U units, ...`` (the stats, in order), and the units per daemon when several."""
    line = "k3lsp audit: " + ", ".join(f"{v} {k}" for k, v in stats(report).items())
    if len(report.by_backend) > 1:
        line += "; audited on " + ", ".join(f"{e}: {n}" for e, n in report.by_backend.items())
    return sanitize.line(line)


def written_summary(report: BatchReport, path: Path) -> str:
    """What the terminal is told when the report went to a file: the findings by severity, where, and the stats."""
    by = Counter(r.severity for r in report.findings)
    severities = ", ".join(f"{by[s]} {s}" for s in SEVERITIES if by[s])
    found = f"{len(report.findings)} findings" + (f" ({severities})" if severities else "")
    return sanitize.line(f"k3lsp audit: {found} in {path}; " + summary_line(report).removeprefix("k3lsp audit: "))


def _lines_of(path: str) -> list[str] | None:
    """A reported file's lines, read again to quote them (None when it is gone or unreadable)."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    except OSError:
        return None


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
