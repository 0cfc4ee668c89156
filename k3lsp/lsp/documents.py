"""What the server knows about one C file: raw results per unit key, and the findings shown for its text.

Results are stored by unit content key, so they stay valid wherever the function moves; what is shown is
derived from them for the current text by the findings pipeline (``k3lsp.findings.pipeline``: validated against the
unit, filtered by severity, inline comments and the baseline). Between saves, shown findings follow the edits
(``k3lsp.lsp.diffing``) instead of being recomputed, so typing never costs a parse and never leaves a squiggle on
the wrong line.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lsprotocol import types as lsp

from k3lsp.core.options import Options
from k3lsp.core.scope import Changed
from k3lsp.findings import model as findings
from k3lsp.findings import pipeline, suppress
from k3lsp.kbuild.state import Kind, State
from k3lsp.lsp import convert, diffing
from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit
from k3lsp.witnesses import shown as witnessed
from k3lsp.witnesses.alert import Alert


@dataclass(frozen=True)
class Shown(pipeline.Reportable):
    """One finding on screen, with its diagnostic: the unit it belongs to is kept at its current position
    (shifted by edits). ``unbuilt``: why the kconfig does not build its unit, for the hover (``unbuilt: hint``)."""

    diagnostic: lsp.Diagnostic
    unbuilt: str = ""

    def contains(self, position: lsp.Position) -> bool:
        rng = self.diagnostic.range
        return rng.start.line <= position.line <= rng.end.line

    def moved(self, lines: int) -> Shown:
        return _moved(self, lines)


@dataclass(frozen=True)
class Notice:
    """A note on a unit that is not a finding (the daemon refused it as too long to audit); it follows edits
    as findings do, and has no hover or code actions."""

    unit: Unit
    diagnostic: lsp.Diagnostic

    def moved(self, lines: int) -> Notice:
        return _moved(self, lines)


def _follow(items: list, changes: Sequence[Any]) -> list:
    """Shown findings or notices after didChange content changes (moved, or dropped when their unit changed)."""
    return [a.item.moved(a.shift) for a in diffing.follow_edits([diffing.Anchor.on(x.unit, x) for x in items], changes)]


def _moved(item, lines: int):
    """``item`` (a Shown or Notice) with its unit and diagnostic ``lines`` further down."""
    if lines == 0:
        return item
    unit = dataclasses.replace(item.unit, start_line=item.unit.start_line + lines, end_line=item.unit.end_line + lines)
    return dataclasses.replace(item, unit=unit, diagnostic=diffing.shifted(item.diagnostic, lines))


UNBUILT = "unbuilt"  # why a finding is not shown: unbuilt: hide, in code the kconfig does not build


@dataclass(frozen=True)
class Silenced:
    """Findings not shown because someone silenced them: the status says how many, so none goes unnoticed."""

    suppressed: int = 0  # by a `k3-audit: ignore` comment in the source
    baselined: int = 0  # by the workspace baseline
    refuted: int = 0  # by the model itself (its refutation turn, or its triage of an analyzer alert)
    unbuilt: int = 0  # in code the kconfig does not build, with unbuilt: hide

    def plus(self, why: str) -> Silenced:
        if why == UNBUILT:
            return dataclasses.replace(self, unbuilt=self.unbuilt + 1)
        if why == pipeline.IN_SOURCE:
            return dataclasses.replace(self, suppressed=self.suppressed + 1)
        if why == pipeline.REFUTED:
            return dataclasses.replace(self, refuted=self.refuted + 1)
        return dataclasses.replace(self, baselined=self.baselined + 1)

    def __add__(self, other: Silenced) -> Silenced:
        return Silenced(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))


@dataclass(frozen=True)
class View:
    """How results are shown: the settings and workspace state the filtering depends on."""

    options: Options  # minSeverity
    baseline: suppress.Baseline | None = None
    related_information: bool = True  # the client shows relatedInformation; otherwise the trace goes in the text


@dataclass(frozen=True)
class FileReport:
    """What an audit of one document came to: the answer of ``k3lsp.auditFile`` and ``reauditFunction``."""

    units: int = 0  # units audited or looked up
    done: int = 0  # ... of which a result is known now (cached or audited)
    findings: int = 0  # findings shown for the document afterwards
    error: str | None = None  # why units were left, or the document could not be audited
    incomplete: int = 0  # units whose audit was cut short
    cancelled: bool = False  # a newer audit of the document superseded this one


@dataclass
class Document:
    uri: str
    path: Path
    root: Path | None  # the sandbox of the model's tools: the workspace folder; None outside it (no tools)
    relpath: str  # relative to root (outside it: the file name), ``/`` separated: what the model sees
    results: dict[str, list[dict]] = field(default_factory=dict)  # unit key -> raw findings
    refusals: dict[str, str] = field(default_factory=dict)  # unit key -> why the daemon refused it (too long)
    shown: list[Shown] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    task: asyncio.Task | None = None  # the audit in flight for this document
    result_id: int = 0  # bumped whenever `shown` changes (pull diagnostics)
    published: int | None = None  # the result_id the client was last told about
    silenced: Silenced = field(default_factory=Silenced)  # of the findings for its text, how many were silenced
    alerts: list[Alert] = field(default_factory=list)  # the witnesses' alerts for its current text (file lines)
    changed: Changed | None = None  # scope changed: its lines the work tree changed (k3lsp.core.scope); None: scope all
    states: dict[str, State] = field(default_factory=dict)  # unit key -> its state under kconfig (none: no kconfig)
    split: tuple[tuple[str, Macros], tuple[Unit, ...]] | None = None  # the last split (text, macros) and its units

    def show(self, shown: list[Shown], notices: list[Notice] | None = None) -> None:
        notices = self.notices if notices is None else notices
        if shown != self.shown or notices != self.notices:
            self.shown, self.notices = shown, notices
            self.result_id += 1

    def record(self, key: str, findings: list[dict], refusal: str | None = None) -> None:
        """The result of one unit: its findings, or (with ``refusal``) why it was not audited."""
        self.results[key] = findings
        if refusal is None:
            self.refusals.pop(key, None)
        else:
            self.refusals[key] = refusal

    def keep_results_for(self, units: Sequence[Unit]) -> None:
        """Forget results of units that no longer exist (they are still in the cache)."""
        keys = {u.key for u in units}
        self.results = {k: v for k, v in self.results.items() if k in keys}
        self.refusals = {k: v for k, v in self.refusals.items() if k in keys}

    def follow(self, changes: Sequence[Any]) -> bool:
        """Apply didChange content changes to what is shown; True if anything moved or disappeared."""
        if not self.shown and not self.notices:
            return False
        shown, notices = (_follow(items, changes) for items in (self.shown, self.notices))
        if shown == self.shown and notices == self.notices:
            return False
        self.show(shown, notices)
        return True

    def at(self, position: lsp.Position) -> list[Shown]:
        return [s for s in self.shown if s.contains(position)]

    def by_fingerprint(self, fingerprint: str) -> Shown | None:
        return next((s for s in self.shown if s.fingerprint == fingerprint), None)

    def diagnostics(self) -> list[lsp.Diagnostic]:
        return [s.diagnostic for s in self.shown] + [n.diagnostic for n in self.notices]


def unbuilt(unit: Unit, states: Mapping[str, State], view: View) -> str | None:
    """How the ``unbuilt`` setting treats a unit: None when it shows as any other (built, unknown, no kconfig,
    ``unbuilt: show``), else why the kconfig does not build it ("" when its findings are hidden)."""
    state = states.get(unit.key)
    if state is None or state.kind is not Kind.NOT_BUILT or view.options.unbuilt == "show":
        return None
    return state.reason if view.options.unbuilt == "hint" else ""


def present(
    uri: str,
    text: str,
    units: Sequence[Unit],
    results: dict[str, list[dict]],
    view: View,
    states: Mapping[str, State] = MappingProxyType({}),
) -> tuple[list[Shown], Silenced]:
    """The findings to show for a text (what the findings pipeline reports for the results of its units), and how
    many it silenced; in code the kconfig does not build (``states``), as the ``unbuilt`` setting says."""
    lines = text.split("\n")
    shown, silenced = [], Silenced()
    for unit in units:
        off = unbuilt(unit, states, view)
        raws = results.get(unit.key, ())
        screen = pipeline.screened(
            unit, raws, lines, view.options.min_severity, view.baseline, view.options.show_refuted
        )
        for r, why in screen:
            why = UNBUILT if why is None and off == "" else why  # unbuilt: hide
            if why is None:
                hint = off is not None
                diagnostic = convert.diagnostic(r.finding, r.unit, uri, related=view.related_information, unbuilt=hint)
                shown.append(Shown(r.finding, r.unit, r.fingerprint, diagnostic, off or ""))
            else:
                silenced = silenced.plus(why)
    return shown, silenced


def alert_notices(
    text: str,
    units: Sequence[Unit],
    results: dict[str, list[dict]],
    alerts: Sequence[Alert],
    view: View,
    states: Mapping[str, State] = MappingProxyType({}),
) -> tuple[list[Notice], Silenced]:
    """The analyzers' alerts to show as their own (``k3lsp.witnesses.shown``: none a finding stands for), and how
    many were silenced; they follow edits like the other notes. In code the kconfig does not build (``states``)
    they are hints, or hidden, as findings are."""
    covered: witnessed.Covered = set()
    for unit in units:
        covered |= witnessed.covered_by(findings.accept(results.get(unit.key, ()), unit), unit)
    out, silenced = [], Silenced()
    for alert, unit, why in witnessed.screened(alerts, units, text.split("\n"), covered, view.baseline):
        off = unbuilt(unit, states, view)
        why = UNBUILT if why is None and off == "" else why  # unbuilt: hide
        if why is None:
            severity = "hint" if off is not None else view.options.witness_severity
            out.append(Notice(unit, convert.alert_diagnostic(alert, unit, severity)))
        else:
            silenced = silenced.plus(why)
    return out, silenced


def notices(units: Sequence[Unit], refusals: dict[str, str]) -> list[Notice]:
    """A "too long to audit" note on the first line of every unit the daemon refused."""
    return [
        Notice(unit, convert.refusal_diagnostic(unit, refusals[unit.key])) for unit in units if unit.key in refusals
    ]
