"""The code actions offered on a finding: apply the fix, explain, suppress (line or baseline), re-audit.

Every one is a ``CodeAction`` of kind ``quickfix`` tied to its diagnostic, so clients that list actions by
kind (``context.only``, a quick-fix menu) offer all of them. Edits are computed right away (they are cheap
and make the action work in every client, without a resolve round trip); actions that need the server to
act later (explain, baseline, re-audit) carry a command the client runs through ``workspace/executeCommand``.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types as lsp

from k3lsp.findings import suppress
from k3lsp.lsp import convert
from k3lsp.lsp.documents import Shown

EXPLAIN = "k3lsp.explain"
SUPPRESS_IN_BASELINE = "k3lsp.suppressInBaseline"
REAUDIT_FUNCTION = "k3lsp.reauditFunction"
FIND_VARIANTS = "k3lsp.findVariants"  # k3lsp.lsp.variants: the same bug elsewhere in the workspace


def for_finding(shown: Shown, uri: str, lines: list[str]) -> list[lsp.CodeAction]:
    """Every action that applies to one shown finding, the fix first (it is the preferred one)."""
    f, unit, diagnostic = shown.finding, shown.unit, shown.diagnostic
    label = f"CWE-{f.cwe}"
    out: list[lsp.CodeAction] = []
    fix = convert.workspace_edit(uri, shown.fix)
    if fix is not None:
        out.append(_quick_fix(f"Apply suggested fix ({label}: {f.title})", diagnostic, edit=fix, preferred=True))
    out.append(_quick_fix(f"Explain this {label} finding", diagnostic, command=(EXPLAIN, [uri, shown.fingerprint])))
    variants = (FIND_VARIANTS, [uri, shown.fingerprint])
    out.append(_quick_fix(f"Find variants of this {label} finding in the workspace", diagnostic, command=variants))
    line_edit = convert.workspace_edit(uri, suppress.suppression_edit(lines, unit.file_line(f.start_line), f.cwe))
    if line_edit is not None:
        out.append(_quick_fix(f"Suppress {label} on this line", diagnostic, edit=line_edit))
    baseline = (SUPPRESS_IN_BASELINE, [uri, shown.fingerprint])
    out.append(_quick_fix(f"Suppress this {label} finding in the workspace baseline", diagnostic, command=baseline))
    out.append(_quick_fix(f"Re-audit {unit.name}", diagnostic, command=(REAUDIT_FUNCTION, [uri, unit.start_line])))
    return out


def only(offered: list[lsp.CodeAction], kinds: Sequence[str] | None) -> list[lsp.CodeAction]:
    """The actions a client asked for with ``context.only``: a kind matches itself and its sub-kinds."""
    if kinds is None:
        return offered
    return [a for a in offered if any(a.kind == k or str(a.kind).startswith(f"{k}.") for k in kinds)]


def _quick_fix(
    title: str,
    diagnostic: lsp.Diagnostic,
    *,
    edit: lsp.WorkspaceEdit | None = None,
    command: tuple[str, list] | None = None,
    preferred: bool | None = None,
) -> lsp.CodeAction:
    """A quick fix tied to its diagnostic (clients list it under the squiggle): an edit now, or a command
    ``(name, arguments)`` run later."""
    return lsp.CodeAction(
        title=title,
        kind=lsp.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=edit,
        command=lsp.Command(title=title, command=command[0], arguments=command[1]) if command else None,
        is_preferred=preferred,
    )
