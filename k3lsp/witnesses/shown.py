"""Analyzer alerts shown at once, before (or without) the model's word, labelled as the tool's.

An alert becomes a diagnostic (``k3lsp.lsp.convert.alert_diagnostic``) whose ``source`` is the tool (``cppcheck``,
``clang``...), at the ``witnessSeverity`` setting, its message saying it is an analyzer's alert the model has not
triaged: that is what an editor shows while the daemon is loading, down, or still auditing. The same silencing as
findings applies: a ``k3-audit: ignore`` comment on its line (for its CWE, or every CWE) and the workspace baseline
(an alert's fingerprint names tool, rule, function, flagged line and message, never its line number). Once the
model has triaged an alert, the finding it became (or merged into, ``k3lsp.core.verdicts``) stands for it: an alert
whose tool, rule and line a finding's ``witness`` names is not shown again, whether that finding is shown,
refuted or silenced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from k3lsp.findings import model as findings
from k3lsp.findings import suppress
from k3lsp.findings.pipeline import EXTERNAL, IN_SOURCE
from k3lsp.units.split import Unit
from k3lsp.witnesses.alert import Alert

Covered = set[tuple[str, str, int]]  # (tool, rule, 0-based file line) of the alerts a finding stands for


def covered_by(found: Iterable[findings.Finding], unit: Unit) -> Covered:
    """The alerts that these findings of ``unit`` stand for."""
    return {(f.witness.tool, f.witness.rule, unit.file_line(f.witness.line)) for f in found if f.witness is not None}


def unit_of(alert: Alert, units: Sequence[Unit]) -> Unit | None:
    """The unit whose lines hold the alert's line (None: between functions)."""
    line = alert.line - 1
    return next((u for u in units if u.start_line <= line <= u.end_line), None)


def for_unit(alerts: Sequence[Alert], unit: Unit) -> tuple[Alert, ...]:
    """The alerts on the lines of ``unit``: what its audit request carries."""
    return tuple(a for a in alerts if unit.start_line <= a.line - 1 <= unit.end_line)


def fingerprint(alert: Alert, unit: Unit) -> str:
    """A stable name for an alert, as for findings: never its line number, so a baseline survives edits above."""
    flagged = unit.text.split("\n")[alert.line - 1 - unit.start_line]
    h = hashlib.sha256(b"k3lsp-alert-v1\0")
    for part in (alert.tool, alert.rule, unit.name, " ".join(flagged.split()), alert.message):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()[:32]


def screened(
    alerts: Sequence[Alert],
    units: Sequence[Unit],
    lines: list[str],
    covered: Covered,
    baseline: suppress.Baseline | None = None,
) -> Iterable[tuple[Alert, Unit, str | None]]:
    """The alerts to show as the analyzers' own, each with its unit and how it is silenced (the findings
    pipeline's words: ``inSource``, ``external``, or None: shown). Alerts a finding stands for, and alerts
    between functions, are left out."""
    for alert in alerts:
        unit = unit_of(alert, units)
        if unit is None or (alert.tool, alert.rule, alert.line - 1) in covered:
            continue
        if suppress.is_suppressed(lines, alert.line - 1, alert.cwe or 0):
            yield alert, unit, IN_SOURCE
        elif baseline is not None and fingerprint(alert, unit) in baseline:
            yield alert, unit, EXTERNAL
        else:
            yield alert, unit, None
