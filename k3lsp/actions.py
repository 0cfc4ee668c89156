"""The code actions offered on a finding: apply the fix, explain, suppress (line or baseline), re-audit.

Edits are computed right away (they are cheap and make the action work in every client, without a
resolve round trip). Actions that need the server to act later (explain, baseline, re-audit) are plain
``Command`` items, which every client runs through ``workspace/executeCommand``.
"""

from __future__ import annotations

from lsprotocol import types as lsp

from k3lsp import findings, suppress
from k3lsp.documents import Shown

EXPLAIN = "k3lsp.explain"
SUPPRESS_IN_BASELINE = "k3lsp.suppressInBaseline"
REAUDIT_FUNCTION = "k3lsp.reauditFunction"


def for_finding(shown: Shown, uri: str, lines: list[str]) -> list[lsp.CodeAction | lsp.Command]:
    """Every action that applies to one shown finding, the fix first (it is the preferred one)."""
    f, unit, diagnostic = shown.finding, shown.unit, shown.diagnostic
    label = f"CWE-{f.cwe}"
    out: list[lsp.CodeAction | lsp.Command] = []
    fix = findings.fix_edit(f, unit, uri)
    if fix is not None:
        out.append(_quick_fix(f"Apply suggested fix ({label}: {f.title})", diagnostic, fix, preferred=True))
    out.append(lsp.Command(title=f"Explain this {label} finding", command=EXPLAIN, arguments=[uri, shown.fingerprint]))
    line_edit = suppress.suppression_edit(lines, unit.file_line(f.start_line), f.cwe)
    if line_edit is not None:
        edit = lsp.WorkspaceEdit(changes={uri: [line_edit]})
        out.append(_quick_fix(f"Suppress {label} on this line", diagnostic, edit))
    out.append(
        lsp.Command(
            title=f"Suppress this {label} finding in the workspace baseline",
            command=SUPPRESS_IN_BASELINE,
            arguments=[uri, shown.fingerprint],
        )
    )
    out.append(lsp.Command(title=f"Re-audit {unit.name}", command=REAUDIT_FUNCTION, arguments=[uri, unit.start_line]))
    return out


def _quick_fix(
    title: str, diagnostic: lsp.Diagnostic, edit: lsp.WorkspaceEdit, *, preferred: bool | None = None
) -> lsp.CodeAction:
    """An edit computed now, tied to its diagnostic (clients list it under the squiggle)."""
    return lsp.CodeAction(
        title=title, kind=lsp.CodeActionKind.QuickFix, diagnostics=[diagnostic], edit=edit, is_preferred=preferred
    )
