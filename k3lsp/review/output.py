"""What ``k3lsp review`` prints: text per patch (introduced first), JSON, SARIF 2.1.0, or a reply for the list.

- **text**: per patch its title, the introduced findings, then the pre-existing ones and those in callers,
  compiler-style (``path:line:col: severity CWE-n title``), then one line of totals;
- **JSON**: the same, with every field of each finding (``k3lsp audit``'s rows plus ``introduced``, ``why``,
  ``caller``) and the units each patch had audited;
- **SARIF**: ``k3lsp.cli.sarif`` (the code of ``k3lsp audit --format sarif``), one run per patch (``runs=patch``)
  or one for all (``runs=range``), each result with ``baselineState`` ``new`` (introduced) or ``unchanged``;
- **email**: per patch with findings a plain-text reply, as a reviewer writes one: ``Subject: Re: ...``, and
  ``In-Reply-To``/``References`` when the patch came from a mail, the attribution line, then only the hunks
  that carry findings, quoted, each comment under the line it is about, prose wrapped at 72 columns; findings
  on lines outside every hunk (pre-existing ones in a changed function) are listed after. Several replies are
  separated by mbox ``From`` lines, so the output is an mbox ``git send-email`` takes.

Every text of the model or the repository reaching a terminal or a mail is sanitised (``k3lsp.wire.sanitize``).
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any, TextIO

from k3lsp.cli import sarif
from k3lsp.cli.batch import BatchReport
from k3lsp.core.run import Target
from k3lsp.findings.pipeline import EXTERNAL, IN_SOURCE
from k3lsp.review.changed import PatchReview, ReviewFinding, ReviewReport
from k3lsp.wire import sanitize

WIDTH = 72  # of a mail's prose, as kernel mailing lists expect
RUNS = ("patch", "range")
_MBOX_FROM = "From k3lsp Mon Sep 17 00:00:00 2001"  # as git format-patch separates messages


# How a patch tried to silence its own finding (ReviewFinding.silenced_by_patch), said after "the patch adds".
_SILENCING = {IN_SOURCE: "the k3-audit: ignore comment", EXTERNAL: "the baseline entry"}


def silencing(f: ReviewFinding) -> str:
    """What the patch added to silence its own finding, which does not apply; "" when it added nothing."""
    return f"the patch adds {_SILENCING[f.silenced_by_patch]} that would silence it" if f.silenced_by_patch else ""


def _where(f: ReviewFinding) -> str:
    r = f.row
    tried = f" [{silencing(f)}; not applied]" if f.silenced_by_patch else ""
    return f"{r.path}:{r.line}:{r.column}: {r.severity} CWE-{r.cwe} {r.title} ({r.unit}){tried}"


def totals(report: ReviewReport) -> dict[str, int]:
    c = report.counters
    every = [f for p in report.patches for f in p.findings]
    return {
        "patches": len(report.patches),
        "units": sum(len(p.units) for p in report.patches),
        "callers": sum(len(p.callers) for p in report.patches),
        "introduced": sum(f.introduced for f in every),
        "preexisting": sum(not f.introduced for f in every),
        "silenced": sum(len(p.silenced) for p in report.patches),
        "silenced_by_patch": sum(len(p.silenced_by_patch) for p in report.patches),
        "audited": c.audited,
        "cached": c.cached,
        "tokens": c.tokens,
    }


def print_problems(report: ReviewReport, err: TextIO = sys.stderr) -> None:
    for patch in report.patches:
        if patch.patch.error:
            print(sanitize.line(f"k3lsp review: error: {patch.patch.title}: {patch.patch.error}"), file=err)
    for warning in [*report.warnings, *self_silencing(report.patches)]:
        print(sanitize.line(f"k3lsp review: warning: {warning}"), file=err)
    for error in report.errors:
        print(sanitize.line(f"k3lsp review: error: {error}"), file=err)


def print_text(report: ReviewReport, out: TextIO = sys.stdout) -> None:
    for patch in report.patches:
        print(sanitize.line(_heading(patch)), file=out)
        groups = (
            ("introduced", [f for f in patch.findings if f.introduced]),
            ("pre-existing", [f for f in patch.findings if not f.introduced and not f.caller]),
            ("in callers of changed functions", [f for f in patch.findings if f.caller]),
        )
        for name, found in groups:
            if found:
                print(f"  {name}:", file=out)
                for f in found:
                    print("    " + sanitize.line(_where(f)), file=out)
        names = ", ".join(f"{t.path}:{t.unit.name}" for t in patch.units) or "none"
        print("  " + sanitize.line(f"reviewed {len(patch.units)} changed units: {names}"), file=out)
        for note in patch.notes:
            print("  " + sanitize.line(f"note: {note}"), file=out)
    print("k3lsp review: " + ", ".join(f"{v} {k}" for k, v in totals(report).items()), file=out)


def self_silencing(patches: list[PatchReview]) -> list[str]:
    """A warning per finding that its own patch tried to silence: the reviewer should know it was tried."""
    return [
        f"{p.patch.title}: {f.row.path}:{f.row.line}: CWE-{f.row.cwe} {f.row.title}: {silencing(f)}; not applied"
        for p in patches
        for f in p.silenced_by_patch
    ]


def _heading(patch: PatchReview) -> str:
    p = patch.patch
    return p.title + (f" (commit {p.commit[:12]})" if p.commit else "") + (f": {p.error}" if p.error else "")


def _finding(f: ReviewFinding) -> dict[str, Any]:
    return asdict(f.row) | {
        "introduced": f.introduced,
        "why": f.why,
        "caller": f.caller,
        "silenced_by_patch": f.silenced_by_patch,
    }


def _unit(t: Target) -> dict[str, Any]:
    unit = t.unit
    out: dict[str, Any] = {
        "path": t.path,
        "unit": unit.name,
        "line": unit.start_line + 1,
        "end_line": unit.end_line + 1,
    }
    if t.changes is not None:
        out["changed_lines"] = [unit.file_line(k) + 1 for k in t.changes.lines]
    return out


def to_json(report: ReviewReport) -> dict[str, Any]:
    return {
        "root": str(report.root),
        "patches": [
            {
                "title": p.patch.title,
                "commit": p.patch.commit,
                "message_id": p.patch.message_id or None,
                "error": p.patch.error,
                "units": [_unit(t) for t in p.units],
                "callers": [_unit(t) for t in p.callers],
                "findings": [_finding(f) for f in p.findings],
                "silenced": [_finding(f) for f in p.silenced],
                "notes": p.notes,
            }
            for p in report.patches
        ],
        "errors": report.errors,
        "warnings": report.warnings,
        "stats": totals(report),
    }


def print_json(report: ReviewReport, out: TextIO = sys.stdout) -> None:
    json.dump(to_json(report), out, indent=2)
    out.write("\n")


# --- SARIF -------------------------------------------------------------------------------------------------


def to_sarif(report: ReviewReport, exit_code: int, runs: str = "patch") -> dict[str, Any]:
    """One run per patch (``runs="patch"``, its ``automationDetails`` naming the patch) or one for the range."""
    groups = [[p] for p in report.patches] if runs == "patch" else [report.patches]
    out = sarif.to_sarif(BatchReport(report.root, errors=report.errors, warnings=report.warnings), exit_code)
    if report.patches:
        out["runs"] = [_run(report, group, exit_code, runs == "patch") for group in groups]
    return out


def _run(report: ReviewReport, group: list[PatchReview], exit_code: int, named: bool) -> dict[str, Any]:
    every = [f for p in group for f in (*p.findings, *p.silenced)]
    state = {id(f.row): "new" if f.introduced else "unchanged" for f in every}
    rows = BatchReport(
        report.root,
        files=sum(len(p.files) for p in group),
        units=sum(len(p.units) + len(p.callers) for p in group),
        findings=[f.row for p in group for f in p.findings],
        silenced=[f.row for p in group for f in p.silenced],
        errors=report.errors + [f"{p.patch.title}: {p.patch.error}" for p in group if p.patch.error],
        warnings=report.warnings + self_silencing(group),
    )
    (run,) = sarif.to_sarif(rows, exit_code, lambda r: state[id(r)])["runs"]
    findings = [f for p in group for f in p.findings] + [f for p in group for f in p.silenced]  # the results' order
    for result, f in zip(run["results"], findings, strict=True):
        if f.silenced_by_patch:
            result["properties"]["silencedByPatch"] = f.silenced_by_patch
    if named:
        run["automationDetails"] = {"id": f"k3lsp-review/{_run_id(group[0])}"}
        run["properties"] = {"patch": sanitize.sarif(group[0].patch.title)}
    return run


def _run_id(patch: PatchReview) -> str:
    p = patch.patch
    return p.commit or p.message_id.strip("<>") or "".join(c if c.isalnum() else "-" for c in p.title)[:80]


# --- email -------------------------------------------------------------------------------------------------


def replies(report: ReviewReport) -> list[str]:
    """One reply per patch with findings (none for a patch without)."""
    return [text for p in report.patches if (text := reply(p)) is not None]


def print_email(report: ReviewReport, out: TextIO = sys.stdout) -> None:
    texts = replies(report)
    for text in texts:
        if len(texts) > 1:
            print(_MBOX_FROM, file=out)
        out.write(text)
        if len(texts) > 1:
            out.write("\n")


def reply(review: PatchReview) -> str | None:
    """The reply to one patch: headers, attribution, the quoted hunks with findings, the rest listed."""
    if not review.findings:
        return None
    p = review.patch
    subject = p.title if p.message_id else f"[PATCH] {p.title}"
    lines = [f"Subject: Re: {subject}"]
    if p.message_id:
        lines += [f"In-Reply-To: {p.message_id}", f"References: {' '.join((*p.references, p.message_id))}"]
    lines.append("")
    if p.author:
        lines += [f"On {p.date}, {p.author} wrote:" if p.date else f"{p.author} wrote:"]
    placed: set[int] = set()
    for path, file in review.files.items():
        here = [f for f in review.findings if f.row.uri == path]
        quoted = [q for hunk in file.hunks if (q := list(_quote_hunk(hunk, here, placed)))]
        if quoted:
            lines += [f"> --- a/{file.old_path}" if file.old_path else "> --- /dev/null", f"> +++ b/{path}"]
            lines += [line for q in quoted for line in (*q, "")]
    rest = [f for f in review.findings if id(f) not in placed]
    if rest:
        lines += ["Findings outside the quoted hunks:", ""]
        for f in rest:
            lines += _comment(f, where=True)
    text = "\n".join(sanitize.text(line).rstrip() for line in lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip("\n") + "\n"


def _quote_hunk(hunk, here: list[ReviewFinding], placed: set[int]) -> Iterator[str]:
    """The hunk quoted, each finding's comment under the last of its lines in the hunk; nothing when none is."""
    post = [line.target_line_no for line in hunk if line.target_line_no is not None]
    anchors: dict[int, list[ReviewFinding]] = {}
    for f in here:
        inside = [n for n in post if f.row.line <= n <= f.row.end_line]
        if inside and id(f) not in placed:
            anchors.setdefault(inside[-1], []).append(f)
            placed.add(id(f))
    if not anchors:
        return
    counts = f"-{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length}"
    yield f"> @@ {counts} @@ {hunk.section_header}".rstrip()
    for line in hunk:
        yield f"> {line.line_type}{line.value.rstrip(chr(10)).rstrip(chr(13))}"
        for f in anchors.get(line.target_line_no, []) if line.target_line_no is not None else []:
            yield ""
            yield from _comment(f)


def _comment(f: ReviewFinding, where: bool = False) -> list[str]:
    r = f.row
    state = "introduced by this patch" if f.introduced else "pre-existing" + (" (in a caller)" if f.caller else "")
    if f.silenced_by_patch:
        state += f"; {silencing(f)} (not applied)"
    head = f"k3-audit: {r.severity}, CWE-{r.cwe} ({sarif.cwe_name(r.cwe)}), {state}: {r.title}"
    if where:
        head = f"{r.uri}:{r.line} ({r.unit}): {head}"
    out = textwrap.wrap(head, WIDTH)
    for paragraph in r.message.split("\n\n"):
        if paragraph.strip():
            out += ["", *textwrap.wrap(" ".join(paragraph.split()), WIDTH)]
    for step in r.trace:
        out += textwrap.wrap(f"- line {step.span.line}: {step.note}", WIDTH, subsequent_indent="  ")
    if r.fix is not None:
        out += ["", "Suggested fix:", *(f"    {code}" for code in r.fix.replacement.split("\n"))]
    return [*out, ""]
