"""What the server knows about one C file: raw results per unit key, and the findings shown for its text.

Results are stored by unit content key, so they stay valid wherever the function moves; what is shown is
derived from them for the current text (validated against the unit, filtered by severity, inline
comments and the baseline). Between saves, shown findings follow the edits (``k3lsp.diffing``) instead of
being recomputed, so typing never costs a parse and never leaves a squiggle on the wrong line.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from k3lsp import diffing, findings, suppress
from k3lsp.findings import Finding
from k3lsp.units import Unit


@dataclass(frozen=True)
class Shown:
    """One finding on screen: the unit it belongs to is kept at its current position (shifted by edits)."""

    finding: Finding
    unit: Unit
    fingerprint: str
    diagnostic: lsp.Diagnostic

    def contains(self, position: lsp.Position) -> bool:
        rng = self.diagnostic.range
        return rng.start.line <= position.line <= rng.end.line

    def moved(self, lines: int) -> Shown:
        if lines == 0:
            return self
        unit = dataclasses.replace(
            self.unit, start_line=self.unit.start_line + lines, end_line=self.unit.end_line + lines
        )
        return dataclasses.replace(self, unit=unit, diagnostic=diffing.shifted(self.diagnostic, lines))


@dataclass(frozen=True)
class View:
    """How results are shown: the settings and workspace state the filtering depends on."""

    min_severity: str = "info"
    baseline: suppress.Baseline | None = None
    related_information: bool = True  # the client shows relatedInformation; otherwise the trace goes in the text


@dataclass
class Document:
    uri: str
    path: Path
    root: Path | None  # the sandbox of the model's tools: the workspace folder; None outside it (no tools)
    relpath: str  # relative to root (outside it: the file name), ``/`` separated: what the model sees
    results: dict[str, list[dict]] = field(default_factory=dict)  # unit key -> raw findings
    shown: list[Shown] = field(default_factory=list)
    task: asyncio.Task | None = None  # the audit in flight for this document
    result_id: int = 0  # bumped whenever `shown` changes (pull diagnostics)
    published: int | None = None  # the result_id the client was last told about

    def show(self, shown: list[Shown]) -> None:
        if shown != self.shown:
            self.shown = shown
            self.result_id += 1

    def keep_results_for(self, units: Sequence[Unit]) -> None:
        """Forget results of units that no longer exist (they are still in the cache)."""
        keys = {u.key for u in units}
        self.results = {k: v for k, v in self.results.items() if k in keys}

    def follow(self, changes: Sequence[Any]) -> bool:
        """Apply didChange content changes to what is shown; True if anything moved or disappeared."""
        if not self.shown:
            return False
        anchors = diffing.follow_edits([diffing.Anchor.on(s.unit, s) for s in self.shown], changes)
        followed = [a.item.moved(a.shift) for a in anchors]
        if followed == self.shown:
            return False
        self.show(followed)
        return True

    def at(self, position: lsp.Position) -> list[Shown]:
        return [s for s in self.shown if s.contains(position)]

    def by_fingerprint(self, fingerprint: str) -> Shown | None:
        return next((s for s in self.shown if s.fingerprint == fingerprint), None)

    def diagnostics(self) -> list[lsp.Diagnostic]:
        return [s.diagnostic for s in self.shown]


def present(uri: str, text: str, units: Sequence[Unit], results: dict[str, list[dict]], view: View) -> list[Shown]:
    """The findings to show for a text: results of its units, validated, filtered and suppressed."""
    lines = text.split("\n")
    out = []
    for unit in units:
        raws = results.get(unit.key)
        if not raws:
            continue
        for finding in findings.at_least(findings.accept(raws, unit), view.min_severity):
            if suppress.is_suppressed(lines, unit.file_line(finding.start_line), finding.cwe):
                continue
            fingerprint = findings.fingerprint(finding, unit)
            if view.baseline is not None and fingerprint in view.baseline:
                continue
            diagnostic = findings.to_diagnostic(finding, unit, uri, related=view.related_information)
            out.append(Shown(finding, unit, fingerprint, diagnostic))
    return out
