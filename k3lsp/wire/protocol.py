"""The wire between editors and the audit daemon: envelope, message kinds, msgpack codec, validation.

Every message is one msgpack map in one ZeroMQ frame: ``{v, id, kind, ...fields}``. Both sides decode
untrusted bytes, so decoding is hardened (no ext types, string keys only, a size cap) and every decoded
map is checked against the schema of its kind before any code looks at it. Anything wrong raises
:class:`ProtocolError` and nothing else, so the daemon can answer ``error`` and keep serving.

docs/protocol.md is the written spec; ``tests/protocol`` checks that it lists exactly the kinds below.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Literal

import msgpack

VERSION = 1
MAX_FRAME_BYTES = 8 * 1024 * 1024  # a whole unit + context fits many times; memory amplification stays bounded
MAX_ID_CHARS = 128
MAX_OPEN_LISTED = 1024  # request ids a ``pong`` lists at most (more: it lists none, and nothing is checked)
MAX_TEXT_CHARS = 1024 * 1024  # one code unit, context or tool result
MAX_DEPTH = 8  # free-form maps (stats, tool args, limits) nest no deeper than this

SEVERITIES = ("critical", "high", "medium", "low", "info")
VERDICTS = ("confirmed", "refuted", "uncertain")  # the model's word on an analyzer alert or on its own finding
MAX_ALERTS_PER_UNIT = 32  # analyzer alerts one audit request may carry for the model to triage
EFFORTS = ("off", "low", "high", "max")  # how long the model thinks before it answers; off = not at all
DAEMON_STATES = ("loading", "ready", "failed")  # welcome/status `state`: failed = the load failed, it exits
MAX_REASONING_CHARS = 4000  # the reasoning a finding carries (the end of the model's think channel)
TERMINAL_KINDS = frozenset({"done", "error", "cancelled"})
REQUEST_KINDS = ("audit", "explain", "rule")  # answered by a stream of messages and one of TERMINAL_KINDS
PROGRESS_STAGES = ("loading", "queued", "prefill", "decode", "tool")
# The read-only workspace tools a `tool_request` may name; the editor answers them (k3lsp.tools.sandbox). Another name
# is still a valid message: the editor answers it with a refusal the model reads.
WORKSPACE_TOOLS = ("read_lines", "grep", "find_definition", "find_references")


class Priority(StrEnum):
    """What a request waits behind: the daemon serves interactive requests (a save, an explanation) before
    background ones (a workspace or batch audit), and so does the editor's own queue. ``rank`` orders them."""

    INTERACTIVE = "interactive"
    BACKGROUND = "background"

    @property
    def rank(self) -> int:
        return 0 if self is Priority.INTERACTIVE else 1


PRIORITIES = tuple(Priority)


class ConnState(StrEnum):
    """Where an editor stands with one daemon: the ``state`` of the ``k3lsp/status`` notification (docs/lsp.md).

    ``disconnected`` (not contacted yet), ``connecting`` (a hello on its way), ``loading`` (the daemon answers
    but still reads its model), ``connected``, ``down`` (unreachable, stopped, failed) and ``unauthorized``
    (it refuses our key, or ours does not match it). An error code says which one it leaves a daemon in
    (:attr:`ErrorCode.state`)."""

    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    LOADING = "loading"
    CONNECTED = "connected"
    DOWN = "down"
    UNAUTHORIZED = "unauthorized"

    @property
    def usable(self) -> bool:
        """Whether requests may be sent now (a loading daemon takes them and makes them wait)."""
        return self in (ConnState.CONNECTED, ConnState.LOADING)

    @property
    def failed(self) -> bool:
        """Whether the daemon cannot serve us now: the states a person is told about."""
        return self in (ConnState.DOWN, ConnState.UNAUTHORIZED)


class CodeKind(StrEnum):
    """What a client does about an error code (docs/protocol.md, "Error codes")."""

    TRANSIENT = "transient"  # the daemon cannot serve now (a restart, a load, a full queue): retry later, bounded
    REQUEST = "request"  # this request cannot be served, and sending it again fails the same way: never retried
    SETUP = "set-up"  # the client or daemon configuration (keys, versions) must change first


class ErrorCode(StrEnum):
    """Every error code, the one list: ``error`` messages carry it on the wire (a plain string, as members are
    strings) and :class:`CodedError` carries it in code. docs/protocol.md documents each one, and
    ``tests/protocol`` checks that it lists exactly these with these kinds.

    ``kind`` says what a client does about the code; ``state`` is the editor's backend state when the code
    makes the daemon unusable (``down``, unless the daemon is loading or refuses our keys).
    """

    kind: CodeKind
    state: ConnState

    def __new__(cls, value: str, kind: CodeKind, state: ConnState = ConnState.DOWN) -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind, member.state = kind, state
        return member

    BUSY = "busy", CodeKind.TRANSIENT
    SHUTDOWN = "shutdown", CodeKind.TRANSIENT
    RANK_FAILURE = "rank_failure", CodeKind.TRANSIENT
    LOADING = "loading", CodeKind.TRANSIENT, ConnState.LOADING
    LOAD_FAILED = "load_failed", CodeKind.TRANSIENT
    UNREACHABLE = "unreachable", CodeKind.TRANSIENT
    DOWN = "down", CodeKind.TRANSIENT
    BAD_REQUEST = "bad_request", CodeKind.REQUEST
    DUPLICATE = "duplicate", CodeKind.REQUEST
    TOO_LONG = "too_long", CodeKind.REQUEST
    FAILED = "failed", CodeKind.REQUEST
    INTERNAL = "internal", CodeKind.REQUEST
    PROTOCOL = "protocol", CodeKind.REQUEST
    CANCELLED = "cancelled", CodeKind.REQUEST
    VERSION = "version", CodeKind.SETUP
    UNAUTHORIZED = "unauthorized", CodeKind.SETUP, ConnState.UNAUTHORIZED
    SERVER_KEY = "server_key", CodeKind.SETUP, ConnState.UNAUTHORIZED
    SECURITY_MISMATCH = "security_mismatch", CodeKind.SETUP, ConnState.UNAUTHORIZED
    KEYS = "keys", CodeKind.SETUP, ConnState.UNAUTHORIZED
    INSECURE = "insecure", CodeKind.SETUP

    @classmethod
    def of(cls, code: str) -> ErrorCode | None:
        """The member for a code as received; None for one this side does not know (a newer daemon's)."""
        try:
            return cls(code)
        except ValueError:
            return None


def kind_of(code: str) -> CodeKind:
    """The kind of a code as received; a code this side does not know fails its request only."""
    known = ErrorCode.of(code)
    return known.kind if known else CodeKind.REQUEST


def state_for(code: str) -> ConnState:
    """The state a daemon is in for an editor when ``code`` makes it unusable (``ErrorCode.state``)."""
    known = ErrorCode.of(code)
    return known.state if known else ConnState.DOWN


class CodedError(Exception):
    """A failure with an error code: ``code`` (an :class:`ErrorCode`, or a newer daemon's code this side does not
    know) says why for programs, the message says it for people."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


Direction = Literal["to_daemon", "to_client"]


class ProtocolError(ValueError):
    """A frame that is not a valid message of this protocol: bad bytes, wrong types, unknown kind or version."""


# --- field types -------------------------------------------------------------------------------------------
# A checker takes (value, field path) and returns the value, or raises ProtocolError naming the path.

Checker = Callable[[Any, str], Any]


def _fail(path: str, why: str) -> ProtocolError:
    return ProtocolError(f"{path}: {why}")


def string(max_chars: int = MAX_TEXT_CHARS, *, nonempty: bool = False) -> Checker:
    def check(value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise _fail(path, f"expected a string, got {type(value).__name__}")
        if len(value) > max_chars:
            raise _fail(path, f"longer than {max_chars} characters")
        if nonempty and not value:
            raise _fail(path, "must not be empty")
        return value

    return check


def integer(lo: int | None = None, hi: int | None = None) -> Checker:
    def check(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(path, f"expected an integer, got {type(value).__name__}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise _fail(path, f"{value} is outside [{lo}, {hi}]")
        return value

    return check


def number(lo: float | None = None, hi: float | None = None) -> Checker:
    def check(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise _fail(path, f"expected a finite number, got {value!r:.40}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise _fail(path, f"{value} is outside [{lo}, {hi}]")
        return value

    return check


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, f"expected a boolean, got {type(value).__name__}")
    return value


def one_of(*choices: str) -> Checker:
    def check(value: Any, path: str) -> str:
        if value not in choices:
            raise _fail(path, f"{value!r:.40} is not one of {', '.join(choices)}")
        return value

    return check


def list_of(item: Checker, max_items: int = 256) -> Checker:
    def check(value: Any, path: str) -> list:
        if not isinstance(value, list):
            raise _fail(path, f"expected a list, got {type(value).__name__}")
        if len(value) > max_items:
            raise _fail(path, f"more than {max_items} items")
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return check


def free_map(value: Any, path: str, depth: int = 0) -> dict:
    """A map whose contents the protocol does not fix (stats, tool arguments): only shape and depth are checked."""
    if not isinstance(value, dict):
        raise _fail(path, f"expected a map, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail(path, "map keys must be strings")
        _check_free_value(item, f"{path}.{key}", depth + 1)
    return value


def _check_free_value(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _fail(path, f"nested deeper than {MAX_DEPTH}")
    if isinstance(value, dict):
        free_map(value, path, depth)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_free_value(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise _fail(path, "not a finite number")
    elif value is not None and not isinstance(value, str | int | float | bool | bytes):
        raise _fail(path, f"unsupported type {type(value).__name__}")


Schema = Mapping[str, tuple[Checker, bool]]  # field -> (checker, required)


def record(schema: Schema) -> Checker:
    """A map with known fields; unknown fields are dropped so newer peers can add optional fields."""

    def check(value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise _fail(path, f"expected a map, got {type(value).__name__}")
        out = {}
        for name, (checker, required) in schema.items():
            if name in value:
                out[name] = checker(value[name], f"{path}.{name}" if path else name)
            elif required:
                raise _fail(f"{path}.{name}" if path else name, "missing")
        return out

    return check


# --- the shapes --------------------------------------------------------------------------------------------

LINE = integer(1, 10_000_000)

TRACE_STEP = record({"line": (LINE, True), "note": (string(2000), True)})
FIX = record({"start_line": (LINE, True), "end_line": (LINE, True), "replacement": (string(64 * 1024), True)})
FINDING_SCHEMA: Schema = {
    "cwe": (integer(1, 100_000), True),
    "severity": (one_of(*SEVERITIES), True),
    "title": (string(200, nonempty=True), True),
    "message": (string(8000), True),
    "start_line": (LINE, True),
    "end_line": (LINE, True),
    "confidence": (number(0.0, 1.0), False),
    "trace": (list_of(TRACE_STEP, 64), False),
    "fix": (FIX, False),
    "reasoning": (string(MAX_REASONING_CHARS), False),
    # set by the editor, never taken from the model or the daemon: the model's verdict on the finding (the
    # refutation turn, or its triage of the alert it came from), and the analyzer alert it came from or merged with
    "verdict": (record({"verdict": (one_of(*VERDICTS), True), "reason": (string(2000), True)}), False),
    "witness": (record({"tool": (string(64), True), "rule": (string(100), True), "line": (LINE, True)}), False),
    "introduced": (boolean, False),  # under review: the model says the change introduced it
}
_finding_record = record(FINDING_SCHEMA)


def finding(value: Any, path: str) -> dict:
    """A finding as the model reported it; line numbers are 1-based and relative to the audited unit."""
    out = _finding_record(value, path)
    if out["end_line"] < out["start_line"]:
        raise _fail(path, "end_line is before start_line")
    if "fix" in out and out["fix"]["end_line"] < out["fix"]["start_line"]:
        raise _fail(f"{path}.fix", "end_line is before start_line")
    out.setdefault("trace", [])
    return out


def validate_finding(value: Any) -> dict:
    """Validate one finding map (e.g. a report_finding tool call's arguments); raises ProtocolError."""
    return finding(value, "finding")


TEXT = string()
NAME = string(1024)
# An analyzer alert for the model to triage (k3lsp.witnesses): ``line`` relative to the unit, like a finding's.
ALERT = record(
    {
        "id": (string(16, nonempty=True), True),
        "tool": (string(64, nonempty=True), True),
        "rule": (string(100), True),
        "cwe": (integer(1, 100_000), False),
        "line": (LINE, True),
        "message": (string(300), True),
    }
)
MAX_CHANGED_LINES = 100_000  # the changed lines of one unit under review (a unit is at most MAX_TEXT_CHARS)
# A unit under review (`k3lsp review`): the lines of `code` the change added or modified (1-based, like findings),
# and the function as it was before the change ("" when the change adds it).
CHANGES = record({"lines": (list_of(LINE, MAX_CHANGED_LINES), True), "preimage": (TEXT, True)})
# A `rule` request's earlier tries (issue 43, variants): the Coccinelle rules the model wrote for the finding and what
# spatch said of each (its parse error, or the miss of the finding's line), so the next rule avoids them.
MAX_RULE_CHARS = 16 * 1024  # one semantic patch: a rule that matches one pattern is a few hundred characters
MAX_RULE_OUTCOME_CHARS = 4000  # spatch's error or the miss, cut by the editor
MAX_RULE_TRIES = 8  # the editor's retries are fewer; the bound keeps a prompt's tries small whoever sends them
RULE_TRY = record(
    {"rule": (string(MAX_RULE_CHARS), True), "outcome": (string(MAX_RULE_OUTCOME_CHARS, nonempty=True), True)}
)

TO_DAEMON: dict[str, Schema] = {
    "hello": {"client": (NAME, True), "version": (string(64), True)},
    "audit": {
        "path": (NAME, True),  # workspace-relative path, for the model's context and tool calls
        "unit": (NAME, True),  # the unit's name, e.g. the function name
        "code": (TEXT, True),  # the unit's text; line 1 of it is start_line of the findings
        "context": (TEXT, True),  # includes, macros, types and prototypes the unit uses
        "first_line": (LINE, False),  # where the unit starts in its file (informational)
        "priority": (one_of(*PRIORITIES), False),
        "max_tokens": (integer(1, 1_000_000), False),
        "thinking_effort": (one_of(*EFFORTS), False),
        "fresh": (boolean, False),  # audit again: no answer from the daemon's result store
        "alerts": (list_of(ALERT, MAX_ALERTS_PER_UNIT), False),  # analyzer alerts in the unit, to triage
        "refute_from": (one_of(*SEVERITIES), False),  # a refutation turn for the findings at or above this severity
        "changes": (CHANGES, False),  # under review: what the change did to the unit
    },
    "explain": {
        "path": (NAME, True),
        "unit": (NAME, True),
        "code": (TEXT, True),
        "context": (TEXT, True),
        "finding": (finding, True),
        "thinking_effort": (one_of(*EFFORTS), False),
    },
    "rule": {  # the model writes a Coccinelle rule matching the finding's pattern; it streams back as `text`
        "path": (NAME, True),
        "unit": (NAME, True),
        "code": (TEXT, True),
        "context": (TEXT, True),
        "finding": (finding, True),
        "tries": (list_of(RULE_TRY, MAX_RULE_TRIES), False),  # earlier rules and what spatch said, oldest first
        "thinking_effort": (one_of(*EFFORTS), False),
        "max_tokens": (integer(1, 1_000_000), False),
    },
    "tool_result": {"call": (string(MAX_ID_CHARS, nonempty=True), True), "ok": (boolean, True), "result": (TEXT, True)},
    "cancel": {},  # the envelope id names the request to cancel
    "ping": {},
    "status": {},
}

TO_CLIENT: dict[str, Schema] = {
    "welcome": {
        "protocol": (integer(0), True),
        "server": (string(64), True),
        "model": (NAME, True),
        "fingerprint": (string(128, nonempty=True), False),  # the served checkpoint (backend/fingerprint.py)
        "experts": (integer(0), True),
        "ranks": (integer(1), True),
        "random_weights": (boolean, False),  # the checkpoint has random weights (the tiny one): its findings are noise
        "limits": (free_map, True),
        "state": (one_of(*DAEMON_STATES), False),  # loading: the model is being read; requests wait for it
        "loading": (free_map, False),  # while loading: stage, bytes_done, bytes_total, percent, eta_seconds
    },
    "progress": {
        "stage": (string(64), True),
        "tokens": (integer(0), False),
        "total": (integer(0), False),
        "detail": (NAME, False),
    },
    "finding": {"finding": (finding, True)},
    "tool_request": {
        "call": (string(MAX_ID_CHARS, nonempty=True), True),
        "tool": (string(64, nonempty=True), True),
        "args": (free_map, True),
    },
    "text": {"text": (TEXT, True)},
    "verdict": {  # the model's verdict on an alert of the request (``ref``: its id) or on a finding (its number)
        "on": (one_of("alert", "finding"), True),
        "ref": (string(16, nonempty=True), True),
        "verdict": (one_of(*VERDICTS), True),
        "reason": (string(2000), True),
        "cwe": (integer(1, 100_000), False),
    },
    "done": {"stats": (free_map, True)},
    "error": {"code": (string(64, nonempty=True), True), "message": (string(4000), True)},
    "cancelled": {},
    "pong": {"open": (list_of(string(MAX_ID_CHARS, nonempty=True), MAX_OPEN_LISTED), False)},
    "status": {"status": (free_map, True)},
}

SCHEMAS: dict[Direction, dict[str, Schema]] = {"to_daemon": TO_DAEMON, "to_client": TO_CLIENT}
_ENVELOPE = record({"v": (integer(), True), "id": (string(MAX_ID_CHARS, nonempty=True), True), "kind": (NAME, True)})


def validate(message: Any, direction: Direction) -> dict:
    """Check a decoded message against its kind's schema and return it with only the known fields."""
    envelope = _ENVELOPE(message, "")
    if envelope["v"] != VERSION:
        raise ProtocolError(f"unsupported protocol version {envelope['v']} (this side speaks {VERSION})")
    schema = SCHEMAS[direction].get(envelope["kind"])
    if schema is None:
        raise ProtocolError(f"unknown kind {envelope['kind']!r:.60} for {direction.replace('_', ' ')}")
    return envelope | record(schema)(message, "")


# --- codec -------------------------------------------------------------------------------------------------


def _reject_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(f"msgpack extension type {code} is not allowed")


def encode(message: Mapping[str, Any]) -> bytes:
    """Pack a message map; raises ProtocolError if it is not packable or too large to send."""
    try:
        frame = msgpack.packb(message, use_bin_type=True, datetime=False)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode message: {exc}") from exc
    if len(frame) > MAX_FRAME_BYTES:
        raise ProtocolError(f"message of {len(frame)} bytes exceeds the {MAX_FRAME_BYTES}-byte frame limit")
    return frame


def unpack(frame: bytes) -> Any:
    """Hardened msgpack decoding of one frame; no schema check (see :func:`decode`)."""
    if len(frame) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    try:
        # unpackb derives its max_*_len limits from len(frame), so a declared length cannot over-allocate.
        return msgpack.unpackb(frame, raw=False, strict_map_key=True, ext_hook=_reject_ext, timestamp=0, use_list=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack documents that "other exceptions can be raised": all are malformed input
        raise ProtocolError(f"not a msgpack frame: {type(exc).__name__}: {exc}"[:300]) from exc


def decode(frame: bytes, direction: Direction) -> dict:
    """Bytes from the wire -> a validated message for the given direction; raises ProtocolError only."""
    message = unpack(frame)
    if isinstance(message, dict) and any(isinstance(k, bytes) for k in message):
        raise ProtocolError("map keys must be strings")
    return validate(message, direction)


def make(kind: str, msg_id: str, **fields: Any) -> dict:
    """Build an envelope; fields are checked when the message is encoded and decoded, not here."""
    return {"v": VERSION, "id": msg_id, "kind": kind, **fields}


def error(msg_id: str, code: str, message: str) -> dict:
    """The daemon's answer to anything it cannot serve; ``code`` is a short stable word for programs."""
    return make("error", msg_id, code=code, message=message[:4000])
