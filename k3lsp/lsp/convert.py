"""The language server's edge: findings, refusals and analyzer alerts in the project's own types, made LSP types.

Below ``k3lsp.lsp`` nothing knows LSP (import-linter holds it): the findings pipeline reports positions, ranges and
edits of ``k3lsp.findings.spans`` and severities as the protocol's words. This module is the one place they become
``lsprotocol`` diagnostics, hovers and edits, and where a severity becomes an editor's (critical and high are
errors, info a hint; a refuted finding, when shown, is a hint whatever its severity).
"""

from __future__ import annotations

from lsprotocol import types as lsp

from k3lsp.findings import model as findings
from k3lsp.findings import spans
from k3lsp.findings.model import HoverStyle
from k3lsp.units.split import Unit
from k3lsp.witnesses import shown as witnessed
from k3lsp.witnesses.alert import Alert

_SEVERITY = {
    "critical": lsp.DiagnosticSeverity.Error,
    "high": lsp.DiagnosticSeverity.Error,
    "medium": lsp.DiagnosticSeverity.Warning,
    "low": lsp.DiagnosticSeverity.Information,
    "info": lsp.DiagnosticSeverity.Hint,
}
_WITNESS_SEVERITY = {  # the witnessSeverity setting's words
    "error": lsp.DiagnosticSeverity.Error,
    "warning": lsp.DiagnosticSeverity.Warning,
    "information": lsp.DiagnosticSeverity.Information,
    "hint": lsp.DiagnosticSeverity.Hint,
}


def severity(word: str) -> lsp.DiagnosticSeverity:
    """A finding's severity (the protocol's word) as an editor's."""
    return _SEVERITY[word]


def position(p: spans.Position) -> lsp.Position:
    return lsp.Position(p.line, p.character)


def range_(r: spans.Range) -> lsp.Range:
    return lsp.Range(position(r.start), position(r.end))


def text_edit(edit: spans.Edit) -> lsp.TextEdit:
    return lsp.TextEdit(range_(edit.range), edit.new_text)


def workspace_edit(uri: str, edit: spans.Edit | None) -> lsp.WorkspaceEdit | None:
    """One edit of one document as a WorkspaceEdit (a code action's), or None without an edit."""
    return None if edit is None else lsp.WorkspaceEdit(changes={uri: [text_edit(edit)]})


def lines(unit: Unit, start_line: int, end_line: int) -> lsp.Range:
    """The LSP range of unit lines start..end (1-based): ``spans.line_range``."""
    return range_(spans.line_range(unit, start_line, end_line))


def diagnostic(
    finding: findings.Finding, unit: Unit, uri: str, *, related: bool = True, unbuilt: bool = False
) -> lsp.Diagnostic:
    """The diagnostic for a finding. `related=False` (client without relatedInformation support) folds
    the trace into the message, as clangd does with notes. ``unbuilt`` (``unbuilt: hint``, in code the kconfig
    does not build): a hint whatever its severity, marked unnecessary as editors dim unused code."""
    message = finding.title + (f"\n{finding.message}" if finding.message else "")
    if finding.fix is not None:
        message += "\n(fix available)"
    related_info = None
    if finding.trace and related:
        related_info = [
            lsp.DiagnosticRelatedInformation(lsp.Location(uri, lines(unit, s.line, s.line)), s.note)
            for s in finding.trace
        ]
    elif finding.trace:
        message += "".join(f"\n  line {unit.file_line(s.line) + 1}: {s.note}" for s in finding.trace)
    if finding.witness is not None:
        message += f"\n(also {finding.witness.tool} {finding.witness.rule})"
    if finding.verdict is not None:
        message += f"\n{finding.verdict.verdict} by the model: {finding.verdict.reason}"
    return lsp.Diagnostic(
        range=lines(unit, finding.start_line, finding.end_line),
        message=message,
        severity=lsp.DiagnosticSeverity.Hint if finding.refuted or unbuilt else severity(finding.severity),
        tags=[lsp.DiagnosticTag.Unnecessary] if unbuilt else None,
        code=f"CWE-{finding.cwe}",
        code_description=lsp.CodeDescription(href=findings.cwe_url(finding.cwe)),
        source=findings.SOURCE,
        related_information=related_info,
        data={"fingerprint": findings.fingerprint(finding, unit)},  # what code actions get back to find the finding
    )


def refusal_diagnostic(unit: Unit, why: str) -> lsp.Diagnostic:
    """An information note on a unit's first line: the daemon refused it as too long to audit."""
    return lsp.Diagnostic(
        range=lines(unit, 1, 1),
        message=f"Too long to audit: {why}. Split the function, or raise the daemon's --max-prompt-tokens.",
        severity=lsp.DiagnosticSeverity.Information,
        code="too-long",
        source=findings.SOURCE,
        data={"unit": unit.name, "unit_key": unit.key},
    )


def alert_diagnostic(alert: Alert, unit: Unit, severity: str) -> lsp.Diagnostic:
    """An analyzer's alert the model has not triaged, as the tool's own diagnostic at the ``witnessSeverity``
    (``hint`` in code the kconfig does not build, with ``unbuilt: hint``)."""
    cwe = f", CWE-{alert.cwe}" if alert.cwe is not None else ""
    line = alert.line - unit.start_line  # 1-based in the unit
    return lsp.Diagnostic(
        range=lines(unit, line, line),
        message=f"{alert.message}\n({alert.tool} {alert.rule}{cwe}: an analyzer's alert, not triaged by the model)",
        severity=_WITNESS_SEVERITY[severity],
        code=alert.rule,
        code_description=lsp.CodeDescription(href=findings.cwe_url(alert.cwe)) if alert.cwe is not None else None,
        source=alert.tool,
        data={"fingerprint": witnessed.fingerprint(alert, unit), "witness": alert.tool},
    )


def hover(finding: findings.Finding, unit: Unit, style: HoverStyle, unbuilt: str = "") -> lsp.Hover:
    """The hover of a finding: ``findings.hover_text`` as Markdown or plain text, over its lines (``unbuilt``: why
    the kernel configuration does not build it)."""
    kind = lsp.MarkupKind.Markdown if style.markdown else lsp.MarkupKind.PlainText
    return lsp.Hover(
        contents=lsp.MarkupContent(kind=kind, value=findings.hover_text(finding, unit, style, unbuilt)),
        range=lines(unit, finding.start_line, finding.end_line),
    )
