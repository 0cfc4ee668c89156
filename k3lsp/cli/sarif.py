"""SARIF 2.1.0 output of ``k3lsp audit``: what code-scanning dashboards (GitHub, GitLab, DefectDojo) import.

One run per audit. Rules are the CWEs that were found (id ``CWE-n``, help link to the CWE page); each
result points at the same range as the editor's diagnostic (1-based lines, UTF-16 columns, the SARIF
default), carries the trace as a code flow, the suggested fix as a replacement of whole lines and the
fingerprint the editor's baseline uses as a partial fingerprint, so a dashboard tracks a finding across
edits above it, and the model's reasoning behind it as the result property ``reasoning``. A finding silenced
by a ``k3-audit: ignore`` comment or by the baseline is a result too, with ``suppressions`` of kind
``inSource`` or ``external`` (dashboards show it as suppressed, and nobody's silence goes unseen). The
invocation says whether the audit was complete (exit code, errors as notifications). ``k3lsp review`` writes one
run per patch (or per range) through the same code, each result with its ``baselineState``.

Every message is plain text (``text``, never ``markdown``: SARIF viewers render that) made by
``sanitize.sarif``: its brackets escaped as the spec says, so model or daemon text forms no embedded link,
nor a Markdown link in a viewer that renders plain text as Markdown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3lsp import __version__
from k3lsp.cli.batch import BatchReport
from k3lsp.findings import pipeline
from k3lsp.findings.model import cwe_url
from k3lsp.findings.report import Reported, Span
from k3lsp.findings.suppress import BASELINE_NAME
from k3lsp.wire import sanitize

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "SRCROOT"
FINGERPRINT_KEY = "k3AuditFingerprint/v1"
INFORMATION_URI = "https://cwe.mitre.org/"

_JUSTIFICATION = {pipeline.IN_SOURCE: "a k3-audit: ignore comment", pipeline.EXTERNAL: f"the baseline {BASELINE_NAME}"}
_LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
# GitHub code scanning sorts security results by this 0-10 score (its documented property).
_SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "3.0", "info": "0.0"}

# Short names of the weaknesses a C audit reports most; others are named by number.
CWE_NAMES = {
    20: "Improper Input Validation",
    22: "Path Traversal",
    78: "OS Command Injection",
    119: "Improper Restriction of Operations within the Bounds of a Memory Buffer",
    120: "Buffer Copy without Checking Size of Input",
    121: "Stack-based Buffer Overflow",
    122: "Heap-based Buffer Overflow",
    125: "Out-of-bounds Read",
    129: "Improper Validation of Array Index",
    134: "Use of Externally-Controlled Format String",
    190: "Integer Overflow or Wraparound",
    191: "Integer Underflow",
    200: "Exposure of Sensitive Information",
    362: "Race Condition",
    369: "Divide By Zero",
    400: "Uncontrolled Resource Consumption",
    401: "Missing Release of Memory after Effective Lifetime",
    415: "Double Free",
    416: "Use After Free",
    457: "Use of Uninitialized Variable",
    476: "NULL Pointer Dereference",
    667: "Improper Locking",
    787: "Out-of-bounds Write",
    835: "Infinite Loop",
    843: "Type Confusion",
    862: "Missing Authorization",
    908: "Use of Uninitialized Resource",
}


def cwe_name(cwe: int) -> str:
    return CWE_NAMES.get(cwe, f"CWE-{cwe}")


def to_sarif(report: BatchReport, exit_code: int, state: Callable[[Reported], str] | None = None) -> dict[str, Any]:
    """The SARIF log of a batch report; ``exit_code`` is the status the command exits with. ``state`` gives each
    result's ``baselineState`` (``k3lsp review``: ``new`` for a finding the patch introduced, ``unchanged``
    for one it did not)."""
    every = report.findings + report.silenced
    cwes = sorted({r.cwe for r in every})
    index = {cwe: i for i, cwe in enumerate(cwes)}
    run = {
        "tool": {
            "driver": {
                "name": "k3lsp",
                "version": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule(cwe) for cwe in cwes],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": report.root.as_uri() + "/"}},
        "invocations": [_invocation(report, exit_code)],
        "columnKind": "utf16CodeUnits",
        "results": [_result(r, index[r.cwe]) | ({"baselineState": state(r)} if state else {}) for r in every],
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule(cwe: int) -> dict[str, Any]:
    name = cwe_name(cwe)
    return {
        "id": f"CWE-{cwe}",
        "name": "".join(w[:1].upper() + w[1:] for w in name.replace("-", " ").split()),
        "shortDescription": {"text": name},
        "helpUri": cwe_url(cwe),
        "properties": {"tags": ["security", f"external/cwe/cwe-{cwe}"]},
    }


def _invocation(report: BatchReport, exit_code: int) -> dict[str, Any]:
    notes = [("warning", w) for w in report.warnings] + [("error", e) for e in report.errors]
    out: dict[str, Any] = {"executionSuccessful": not report.errors, "exitCode": exit_code}
    if notes:
        out["toolExecutionNotifications"] = [{"level": lvl, "message": _message(text)} for lvl, text in notes]
    return out


def _message(text: str) -> dict[str, str]:
    return {"text": sanitize.sarif(text)}


def _region(span: Span) -> dict[str, int]:
    return {"startLine": span.line, "startColumn": span.column, "endLine": span.end_line, "endColumn": span.end_column}


def _location(r: Reported, span: Span, note: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": r.uri, "uriBaseId": SRCROOT},
            "region": _region(span),
        }
    }
    if note is not None:
        out["message"] = _message(note)
    return out


def _result(r: Reported, rule_index: int) -> dict[str, Any]:
    span = Span(r.line, r.column, r.end_line, r.end_column)
    location = _location(r, span)
    location["logicalLocations"] = [{"name": r.unit, "kind": "function"}]
    out: dict[str, Any] = {
        "ruleId": f"CWE-{r.cwe}",
        "ruleIndex": rule_index,
        "level": _LEVEL[r.severity],
        "message": _message(r.title + (f"\n{r.message}" if r.message else "")),
        "locations": [location],
        "partialFingerprints": {FINGERPRINT_KEY: r.fingerprint},
        "properties": {"severity": r.severity, "security-severity": _SECURITY_SEVERITY[r.severity]},
    }
    if r.suppression == pipeline.REFUTED:  # SARIF has no kind for it: the model's verdict is external to the code
        why = _message(f"refuted by the model: {r.verdict_reason}")["text"]
        out["suppressions"] = [{"kind": pipeline.EXTERNAL, "status": "accepted", "justification": why}]
    elif r.suppression is not None:
        out["suppressions"] = [{"kind": r.suppression, "justification": _JUSTIFICATION[r.suppression]}]
    if r.verdict is not None:
        out["properties"]["verdict"] = r.verdict
    if r.kconfig_state is not None:  # what the kconfig setting's configuration does with the unit, and why
        out["properties"]["kconfigState"] = r.kconfig_state
        if r.kconfig_reason:
            out["properties"]["kconfigReason"] = r.kconfig_reason
    if r.confidence is not None:
        out["properties"]["confidence"] = r.confidence
    if r.reasoning:
        out["properties"]["reasoning"] = r.reasoning
    if r.trace:
        steps = [{"location": _location(r, s.span, s.note)} for s in r.trace]
        out["codeFlows"] = [{"threadFlows": [{"locations": steps}]}]
    if r.fix is not None:
        replacement = {"deletedRegion": _region(r.fix.span), "insertedContent": {"text": r.fix.replacement}}
        change = {"artifactLocation": {"uri": r.uri, "uriBaseId": SRCROOT}, "replacements": [replacement]}
        out["fixes"] = [{"description": _message(f"Suggested fix for {r.title}"), "artifactChanges": [change]}]
    return out
