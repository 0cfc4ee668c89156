"""The "Find variants" command on a finding's diagnostic: the same search as ``k3lsp variants`` (``k3lsp.variants``),
its confirmed variants shown as diagnostics that link to the original finding.

The search starts from the finding as shown (its file on disk, its lines), in the workspace folder; its steps show
as progress. Each confirmed variant becomes a diagnostic in its file (source ``k3-audit variants``, the model's
finding, related information pointing at the original), published beside that file's own diagnostics (a client
that pulls diagnostics keeps pushed ones apart, so they are published alone there): they stay until that file's
next audit publishes its findings again. The command answers with the rule's path, the
counts and how far spatch searched (with ``unbuilt: hide`` only the files the ``kconfig`` builds), and the counts
are said in a message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from k3lsp.findings.report import Reported
from k3lsp.lsp import convert
from k3lsp.variants import hunt as hunting
from k3lsp.variants.origin import Origin

if TYPE_CHECKING:
    from k3lsp.lsp.session import Session

SOURCE = "k3-audit variants"


def _range(line: int, column: int, end_line: int, end_column: int) -> lsp.Range:
    """A report's 1-based lines and columns as an LSP range."""
    return lsp.Range(lsp.Position(line - 1, column - 1), lsp.Position(end_line - 1, end_column - 1))


def diagnostic(row: Reported, origin: Origin, origin_uri: str) -> lsp.Diagnostic:
    """A confirmed variant, related to the finding it is a variant of (in the document ``origin_uri``)."""
    here = lsp.Location(origin_uri, _range(origin.line, 1, origin.end_line + 1, 1))
    return lsp.Diagnostic(
        range=_range(row.line, row.column, row.end_line, row.end_column),
        message=f"{row.title}\n{row.message}\n(a variant of {origin.rel}:{origin.line}: {origin.title})",
        severity=convert.severity(row.severity),
        code=f"CWE-{row.cwe}",
        source=SOURCE,
        related_information=[lsp.DiagnosticRelatedInformation(here, f"the original finding: {origin.title}")],
        data={"fingerprint": row.fingerprint, "variant_of": origin.fingerprint},
    )


async def find(session: Session, uri: str, fingerprint: str) -> dict | None:
    """``k3lsp.findVariants``: the search for one shown finding's variants; None when it is not shown."""
    doc = session.docs.get(uri)
    shown = doc.by_fingerprint(fingerprint) if doc else None
    if doc is None or shown is None or doc.root is None:
        session.message("That finding is not shown in a workspace folder; save to re-audit.", lsp.MessageType.Warning)
        return None
    f, unit = shown.finding, shown.unit
    origin = Origin(
        doc.root.resolve(), doc.path.resolve(), unit.file_line(f.start_line) + 1, unit.file_line(f.end_line) + 1,
        f.cwe, f.severity, f.title, f.message, fingerprint,
    )  # fmt: skip
    async with session.progress_bar(f"k3 variants of CWE-{f.cwe}", 0) as report:
        found = await hunting.hunt(session.pool, origin, say=lambda step: report(0, step))
    rows = [r for c in found.candidates if c.verdict == "confirmed" for r in c.rows if r.verdict != "refuted"]
    shown_at = [((doc.root / r.uri).as_uri(), r) for r in rows]  # URIs as the client names the workspace's files
    _publish(session, [(u, diagnostic(r, origin, uri)) for u, r in shown_at])
    counts = found.counts()
    said = ", ".join(f"{n} {v}" for v, n in counts.items())
    problems = "".join(f"\n{e}" for e in found.errors)
    kind = lsp.MessageType.Error if found.errors else lsp.MessageType.Info
    session.message(f"Variants of {f.title}: {said}{problems}", kind)
    rule = None if found.rule_path is None else str(found.rule_path)
    variants = [{"uri": u, "line": r.line, "title": r.title} for u, r in shown_at]
    spatch = None if found.scan is None else found.scan.summary()  # the progress may not show every step
    return {"rule": rule, **counts, "errors": found.errors, "variants": variants, "spatch": spatch}


def _publish(session: Session, shown: list[tuple[str, lsp.Diagnostic]]) -> None:
    by_uri: dict[str, list[lsp.Diagnostic]] = {}
    for uri, diagnostic_ in shown:
        by_uri.setdefault(uri, []).append(diagnostic_)
    for uri, variants in by_uri.items():
        pushed = uri in session.docs and not session.pull  # a client that pulls keeps pushed ones apart
        own = session.docs[uri].diagnostics() if pushed else []
        session.ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=own + variants))
