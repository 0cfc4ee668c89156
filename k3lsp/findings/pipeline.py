"""The findings pipeline: from one unit's raw results to the findings reported, for the editor and the CLI alike.

A unit's results (what the daemon sent, or the cache kept) go through the same steps whoever shows them:
accepted against the unit (``findings.accept``: schema, lines, sanitised text), at or above the
``minSeverity`` setting, not silenced by an inline ``k3-audit: ignore`` comment in the file's current lines,
fingerprinted, not in the workspace baseline (``k3lsp.findings.suppress``). The language server turns what comes out
into diagnostics (``documents.present``), the batch CLI into its report rows (``batch.reported``), so a
finding seen in the editor is the finding ``k3lsp audit`` reports, on the same lines with the same
fingerprint.

A silenced finding is not dropped unseen: :func:`screened` says how each one was silenced (SARIF's suppression
kinds: ``inSource`` for the comment, ``external`` for the baseline), so the editor's status and the CLI count
them and SARIF carries them as suppressed results.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from k3lsp.findings import model as findings
from k3lsp.findings import suppress
from k3lsp.findings.model import Finding
from k3lsp.findings.spans import Edit, Range, line_range, whole_lines
from k3lsp.units.split import Unit


@dataclass(frozen=True)
class Reportable:
    """A finding that passed every step, with the unit it belongs to and its fingerprint. Its file ranges
    (``k3lsp.findings.spans``: 0-based lines, UTF-16 columns) are the ones its diagnostic, code actions and report
    rows use."""

    finding: Finding
    unit: Unit
    fingerprint: str

    @property
    def range(self) -> Range:
        """What the finding flags: its lines, from the first code character to the end of the last line."""
        return line_range(self.unit, self.finding.start_line, self.finding.end_line)

    @property
    def trace(self) -> list[tuple[Range, str]]:
        """Each step of its trace: the step's line and its note."""
        return [(line_range(self.unit, s.line, s.line), s.note) for s in self.finding.trace]

    @property
    def fix(self) -> Edit | None:
        """Its suggested fix as an edit of whole lines, or None without a fix."""
        fix = self.finding.fix
        return None if fix is None else whole_lines(self.unit, fix.start_line, fix.end_line, fix.replacement)


IN_SOURCE, EXTERNAL = "inSource", "external"  # silenced by a `k3-audit: ignore` comment, by the baseline
REFUTED = "refuted"  # hidden because the model refuted it (k3lsp.core.verdicts); shown again with showRefuted


def screened(
    unit: Unit,
    raws: Iterable[Any],
    lines: list[str],
    min_severity: str,
    baseline: suppress.Baseline | None = None,
    show_refuted: bool = False,
) -> Iterator[tuple[Reportable, str | None]]:
    """The findings of one unit at or above ``min_severity``, in the order reported, each with how it is silenced
    (:data:`IN_SOURCE`, :data:`EXTERNAL`, :data:`REFUTED` unless ``show_refuted``, or None: reported): ``raws``
    are its untrusted results, ``lines`` the current lines of its file (where the inline comments are),
    ``baseline`` the workspace's accepted findings (None: no baseline)."""
    for finding in findings.at_least(findings.accept(raws, unit), min_severity):
        found = Reportable(finding, unit, findings.fingerprint(finding, unit))
        if suppress.is_suppressed(lines, unit.file_line(finding.start_line), finding.cwe):
            yield found, IN_SOURCE
        elif baseline is not None and found.fingerprint in baseline:
            yield found, EXTERNAL
        elif finding.refuted and not show_refuted:
            yield found, REFUTED
        else:
            yield found, None
