"""`k3lsp audit PATH...`: the editor's audit outside the editor, for scripts, CI and the README's first command.

Same units, same cache, same client and the same filtering as the language server, so a finding seen in the
editor is the finding printed here and a tree audited once is not audited again. The work is split in
three steps that issue 8 extends: collect the files, audit them into plain reports, then format the reports
(text or JSON now; SARIF later) and map them to an exit status (0 clean, 1 findings, 2 errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from k3lsp import findings, suppress, units
from k3lsp.auditor import Auditor, BackendUnavailable, Counters
from k3lsp.cache import ResultCache
from k3lsp.options import Options, admitted_files

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True)
class Reported:
    """One finding as the batch tool reports it: file coordinates are 1-based, as compilers print them."""

    path: str  # as the user named it: relative to the current directory when inside it
    line: int
    column: int
    end_line: int
    severity: str
    cwe: int
    title: str
    message: str
    unit: str
    fingerprint: str
    confidence: float | None = None


@dataclass
class BatchReport:
    root: Path
    files: int = 0
    findings: list[Reported] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)

    def exit_status(self) -> int:
        if self.errors or self.counters.failed:
            return EXIT_ERROR
        return EXIT_FINDINGS if self.findings else EXIT_CLEAN


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


# --- auditing --------------------------------------------------------------------------------------------


async def audit_paths(paths: Sequence[Path], options: Options, cache: ResultCache | None = None) -> BatchReport:
    """Audit files and directories; never raises for a file or backend problem (they become report errors)."""
    root = audit_root(paths)
    report = BatchReport(root)
    files, report.errors = collect(paths, root, options)
    report.files = len(files)
    auditor = Auditor(options, cache or ResultCache(), client_name="k3lsp-audit", on_state=None)
    report.counters = auditor.counters
    baseline = suppress.Baseline.load(root)
    if baseline.error:
        report.errors.append(baseline.error)
    try:
        results = await asyncio.gather(*(_audit_file(auditor, root, path, options, baseline) for path in files))
    finally:
        await auditor.close()
    for found, error in results:
        report.findings += found
        if error:
            report.errors.append(error)
    report.findings.sort(key=lambda r: (r.path, r.line, r.cwe))
    return report


async def _audit_file(
    auditor: Auditor, root: Path, path: Path, options: Options, baseline: suppress.Baseline
) -> tuple[list[Reported], str | None]:
    rel = path.relative_to(root).as_posix()
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        return [], f"{rel}: {exc.strerror or exc}"
    lines = text.split("\n")
    out: list[Reported] = []
    try:
        async with contextlib.aclosing(auditor.audit(root, rel, units.split(text), priority="background")) as stream:
            async for result in stream:
                for f in findings.at_least(findings.accept(result.findings, result.unit), options.min_severity):
                    reported = _reported(_display(path), f, result.unit, lines, baseline)
                    if reported is not None:
                        out.append(reported)
    except BackendUnavailable as exc:
        return out, f"{rel}: {exc}"
    return out, None


def _display(path: Path) -> str:
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def _reported(shown_path: str, f: findings.Finding, unit: units.Unit, lines: list[str], baseline: suppress.Baseline):
    line = unit.file_line(f.start_line)
    fingerprint = findings.fingerprint(f, unit)
    if suppress.is_suppressed(lines, line, f.cwe) or fingerprint in baseline:
        return None
    rng = findings.line_range(unit, f.start_line, f.end_line)
    return Reported(
        shown_path, line + 1, rng.start.character + 1, rng.end.line + 1, f.severity, f.cwe, f.title, f.message,
        unit.name, fingerprint, f.confidence,
    )  # fmt: skip


# --- output ----------------------------------------------------------------------------------------------


def stats(report: BatchReport) -> dict:
    c = report.counters
    return {
        "files": report.files,
        "units": c.units,
        "audited": c.audited,
        "cached": c.cached,
        "failed": c.failed,
        "findings": len(report.findings),
        "tokens": c.tokens,
    }


def print_text(report: BatchReport, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
    """`path:line:col: severity CWE-n title`, like a compiler, then one stats line."""
    for r in report.findings:
        print(f"{r.path}:{r.line}:{r.column}: {r.severity} CWE-{r.cwe} {r.title}", file=out)
    for error in report.errors:
        print(f"k3lsp audit: error: {error}", file=err)
    print("k3lsp audit: " + ", ".join(f"{v} {k}" for k, v in stats(report).items()), file=out)


def print_json(report: BatchReport, out: TextIO = sys.stdout) -> None:
    body = {
        "root": str(report.root),
        "findings": [asdict(r) for r in report.findings],
        "errors": report.errors,
        "stats": stats(report),
    }
    json.dump(body, out, indent=2)
    out.write("\n")
