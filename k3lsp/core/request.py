"""One attempt at auditing one unit on one daemon: the request, its stream of messages, and what it came to.

The request carries the unit, its file's shared context (one cached prompt prefix per file on the daemon), the
path the model sees, the priority and the thinking effort. While it streams, findings are admitted within the
bounds of one unit (``k3lsp.wire.bounds``: the daemon bounds them too, but it may not be ours), progress goes
to the front end, and the model's tool calls are answered. How it ends decides what the pool does next:

- ``done``: a :class:`~k3lsp.core.run.UnitResult` (complete or cut short);
- ``error`` with a transient code: :class:`Transient`, retried later by the pool (bounded);
- an error that concerns the whole daemon (a set-up code): ``Connection.failed`` and DaemonUnavailable;
- ``too_long``: a refusal, remembered by the pool; any other request-level code (and ``cancelled`` from the
  daemon): a :class:`~k3lsp.core.run.Failure` of this unit only, never retried.
"""

from __future__ import annotations

import contextlib
import logging

from k3lsp.core import verdicts
from k3lsp.core.client import DaemonError, ToolHandler
from k3lsp.core.connection import Connection, DaemonUnavailable
from k3lsp.core.replies import DoneStats
from k3lsp.core.run import Failure, Progress, Target, UnitResult
from k3lsp.wire import protocol, sanitize
from k3lsp.wire.bounds import FindingBounds
from k3lsp.wire.protocol import CodeKind, ErrorCode, Priority, kind_of

log = logging.getLogger(__name__)


class Transient(DaemonUnavailable):
    """One attempt failed for a reason worth another, later attempt (``code`` of kind transient)."""


def concerns_daemon(code: str) -> bool:
    """Whether ``code`` says the daemon as a whole cannot serve us now (as opposed to one request failing)."""
    return kind_of(code) is not CodeKind.REQUEST


def fields_for(target: Target, priority: Priority, effort: str, fresh: bool, refute_from: str | None = None) -> dict:
    unit = target.unit
    extra = ({"fresh": True} if fresh else {}) | ({"refute_from": refute_from} if refute_from else {})
    if target.alerts:
        extra["alerts"] = verdicts.alert_fields(target)
    if target.changes is not None:  # a unit under review (k3lsp.review.changed)
        extra["changes"] = target.changes.wire()
    return {
        "path": target.path,
        "unit": unit.name,
        "code": unit.text,
        "context": unit.sent_context,  # the file's shared declarations: one cached prefix per file
        "first_line": unit.start_line + 1,
        "priority": str(priority),
        "thinking_effort": effort,
    } | extra


async def attempt(
    conn: Connection,
    target: Target,
    *,
    priority: Priority,
    effort: str,
    fresh: bool,
    tools: ToolHandler,
    on_progress: Progress | None,
    refute_from: str | None = None,
) -> UnitResult | Failure:
    """One attempt; raises Transient or DaemonUnavailable as the module says."""
    unit = target.unit
    findings: list[dict] = []
    judged: list[dict] = []
    bounds = FindingBounds()
    try:
        stream = conn.stream("audit", fields_for(target, priority, effort, fresh, refute_from), tools)
        async with contextlib.aclosing(stream) as messages:
            async for message in messages:
                kind = message["kind"]
                if kind == "finding":
                    finding = verdicts.from_daemon(message["finding"])
                    why = bounds.admit(finding)
                    if why is None:
                        findings.append(finding)
                    elif bounds.dropped == 1:
                        log.warning("audit of %s: dropping what the daemon sends beyond: %s", unit.name, why)
                elif kind == "verdict":
                    judged.append(message)
                elif kind == "progress" and on_progress is not None:
                    on_progress(unit, message)
                elif kind == "done":
                    stats = DoneStats.of(message["stats"], bounds.dropped)
                    merged = verdicts.applied(target, findings, judged)
                    return UnitResult(target, merged, stats, endpoint=conn.endpoint)
                elif kind == "cancelled":  # the daemon's decision, not ours (ours raises CancelledError here)
                    return Failure(target, ErrorCode.CANCELLED, "the audit daemon cancelled the audit")
                elif kind == "error":
                    return _failed(conn, target, message["code"], message["message"])
    except DaemonError as exc:
        return _failed(conn, target, exc.code, str(exc))
    except protocol.ProtocolError as exc:  # this unit cannot be sent (over the frame limit): it alone fails
        return Failure(target, ErrorCode.PROTOCOL, str(exc))
    return Failure(target, ErrorCode.PROTOCOL, "the daemon's answer ended without done, error or cancelled")


def _failed(conn: Connection, target: Target, code: str, message: str) -> Failure:
    """A transient reason raises Transient, a set-up one DaemonUnavailable; any other fails this unit only."""
    if kind_of(code) is CodeKind.TRANSIENT:
        raise Transient(code, sanitize.line(message))
    if concerns_daemon(code):
        raise conn.failed(code, message)
    return Failure(target, code, sanitize.line(message))
