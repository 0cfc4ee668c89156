"""The model's verdicts, folded into a unit's findings: triaged analyzer alerts and refuted findings.

A unit's audit request carries its analyzer alerts (``Target.alerts``, numbered ``A1``, ``A2``... in the
order sent, lines made relative to the unit); the daemon answers with ``verdict`` messages: on an alert (the
model's ``triage_alert``) or on one of the findings it sent, numbered from 1 (the refutation turn's
``verdict``). When the audit is done, :func:`applied` turns them into the findings the cache keeps:

- a **confirmed alert** merges into the model's own finding on its line (the finding keeps its trace and
  gains ``witness``: which tool and rule said so too); with no such finding it becomes one, made of the
  alert (its message as title, the model's reason as message and trace, the CWE the model gave or the
  tool's), marked ``verdict: confirmed``;
- a **refuted alert** becomes a finding marked ``verdict: refuted`` with the model's reason: hidden unless
  ``showRefuted``, and it keeps the raw alert off the screen too;
- a finding's own verdict (``confirmed``, ``refuted``, ``uncertain``) is written into it; refuted ones are
  hidden unless ``showRefuted`` (``k3lsp.findings.pipeline``), and every verdict shows in the hover with its reason.

``verdict`` and ``witness`` are the editor's fields: :func:`from_daemon` takes them off whatever a daemon
sends as a finding, so neither a model nor a daemon can mark its own finding as an analyzer's or as refuted.
"""

from __future__ import annotations

from typing import Any

from k3lsp.core.run import Target
from k3lsp.witnesses.alert import Alert

EDITOR_FIELDS = ("verdict", "witness")
ALERT_SEVERITY = "medium"  # a confirmed alert the model did not report itself
UNKNOWN_CWE = 710  # Improper Adherence to Coding Standards: an alert without a CWE nobody named


def alert_fields(target: Target) -> list[dict[str, Any]]:
    """The ``alerts`` of an audit request: the target's alerts with ids and lines relative to its unit."""
    out = []
    for n, alert in enumerate(target.alerts, 1):
        fields: dict[str, Any] = {
            "id": f"A{n}",
            "tool": alert.tool,
            "rule": alert.rule,
            "line": alert.line - target.unit.start_line,  # 1-based in the file -> 1-based in the unit
            "message": alert.message,
        }
        if alert.cwe is not None:
            fields["cwe"] = alert.cwe
        out.append(fields)
    return out


def from_daemon(finding: dict) -> dict:
    """A finding as a daemon sent it, without the fields only the editor sets."""
    return {k: v for k, v in finding.items() if k not in EDITOR_FIELDS}


def _witness(alert: Alert, line: int) -> dict[str, Any]:
    return {"tool": alert.tool, "rule": alert.rule, "line": line}


def _from_alert(alert: Alert, line: int, verdict: dict) -> dict[str, Any]:
    """A finding made of a triaged alert: the tool's words, the model's reason and verdict."""
    reason = verdict["reason"]
    return {
        "cwe": verdict.get("cwe") or alert.cwe or UNKNOWN_CWE,
        "severity": ALERT_SEVERITY,
        "title": f"{alert.message[:180]} ({alert.tool})",
        "message": reason,
        "start_line": line,
        "end_line": line,
        "trace": [{"line": line, "note": reason[:2000]}],
        "witness": _witness(alert, line),
        "verdict": {"verdict": verdict["verdict"], "reason": reason},
    }


def applied(target: Target, findings: list[dict], judged: list[dict]) -> list[dict]:
    """The unit's findings with the model's verdicts folded in (see the module doc). ``judged`` are the
    ``verdict`` messages as received (protocol-valid, otherwise untrusted: an unknown ref is ignored)."""
    out = [dict(f) for f in findings]
    sent = {f["id"]: (a, f["line"]) for a, f in zip(target.alerts, alert_fields(target), strict=True)}
    lines = target.unit.line_count
    for verdict in judged:
        if verdict["on"] == "finding":
            ref = verdict["ref"]
            if ref.isdigit() and 1 <= int(ref) <= len(findings):
                out[int(ref) - 1]["verdict"] = {"verdict": verdict["verdict"], "reason": verdict["reason"]}
            continue
        if verdict["ref"] not in sent or verdict["verdict"] == "uncertain":
            continue
        alert, line = sent[verdict["ref"]]
        if not 1 <= line <= lines:
            continue
        mine = next(
            (f for f in out[: len(findings)] if f["start_line"] <= line <= f["end_line"] and "witness" not in f), None
        )
        if verdict["verdict"] == "confirmed" and mine is not None:
            mine["witness"] = _witness(alert, line)
        else:
            out.append(_from_alert(alert, line, verdict))
    return out
