"""Round trips of every kind, and malformed frames: each raises ProtocolError and nothing else."""

import copy
import functools

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lsp.wire import protocol
from k3lsp.wire.protocol import ProtocolError

FINDING = {
    "cwe": 787,
    "severity": "high",
    "title": "Out-of-bounds write",
    "message": "len is user controlled",
    "start_line": 3,
    "end_line": 4,
    "confidence": 0.8,
    "trace": [{"line": 1, "note": "len from user"}, {"line": 3, "note": "memcpy"}],
    "fix": {"start_line": 3, "end_line": 3, "replacement": "\tif (len > sizeof(buf)) return -EINVAL;\n"},
}
UNIT = {"path": "drivers/x.c", "unit": "x_ioctl", "code": "int x(void)\n{\n}\n", "context": "#include <x.h>"}

EXAMPLES = {
    "to_daemon": {
        "hello": {"client": "k3lsp/0.1.0", "version": "0.1.0"},
        "audit": UNIT
        | {"first_line": 10, "priority": "background", "max_tokens": 64, "refute_from": "medium"}
        | {"alerts": [{"id": "A1", "tool": "cppcheck", "rule": "nullPointer", "cwe": 476, "line": 2, "message": "m"}]},
        "explain": UNIT | {"finding": FINDING},
        "rule": UNIT | {"finding": FINDING, "tries": [{"rule": "@@\n@@\n* kfree(...);\n", "outcome": "no match"}]},
        "tool_result": {"call": "c1", "ok": True, "result": "line 1\nline 2"},
        "cancel": {},
        "ping": {},
        "status": {},
    },
    "to_client": {
        "welcome": {
            "protocol": 1,
            "server": "0.1.0",
            "model": "tiny",
            "experts": 451,
            "ranks": 2,
            "limits": {"max_tokens": 1024},
        },
        "progress": {"stage": "decode", "tokens": 12, "detail": "x_ioctl"},
        "finding": {"finding": FINDING},
        "tool_request": {"call": "c1", "tool": "read_lines", "args": {"path": "a.c", "start": 1, "end": 9}},
        "text": {"text": "The length"},
        "verdict": {"on": "alert", "ref": "A1", "verdict": "refuted", "reason": "n is checked on line 2", "cwe": 476},
        "done": {"stats": {"prompt_tokens": 100, "cached_tokens": 80, "finish_reason": "stop"}},
        "error": {"code": "bad_request", "message": "kind: missing"},
        "cancelled": {},
        "pong": {},
        "status": {"status": {"queued": 0, "active": 1, "loop_rate": 0.0}},
    },
}


def test_examples_cover_every_kind():
    for direction, kinds in EXAMPLES.items():
        assert set(kinds) == set(protocol.SCHEMAS[direction])


@pytest.mark.parametrize(("direction", "kind"), [(d, k) for d, ks in EXAMPLES.items() for k in ks])
def test_round_trip(direction, kind):
    message = protocol.make(kind, "req-1", **EXAMPLES[direction][kind])
    decoded = protocol.decode(protocol.encode(message), direction)
    expected = message | ({"finding": FINDING} if "finding" in message else {})
    assert decoded == expected


def test_unknown_fields_are_dropped_not_fatal():
    frame = protocol.encode(protocol.make("ping", "p", future_field=[1, 2]))
    assert protocol.decode(frame, "to_daemon") == protocol.make("ping", "p")


def test_missing_trace_defaults_to_empty():
    finding = {k: v for k, v in FINDING.items() if k != "trace"}
    assert protocol.validate_finding(finding)["trace"] == []


def raw(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


GOOD = protocol.encode(protocol.make("audit", "a", **UNIT))

MALFORMED = {
    "empty": b"",
    "truncated": GOOD[:-5],
    "trailing byte": GOOD + b"\x00",
    "reserved byte": b"\xc1",
    "random bytes": bytes(range(7, 70)),
    "not a map": raw([1, 2, 3]),
    "huge declared array": b"\xdd\xff\xff\xff\xff",
    "huge declared map": b"\xdf\xff\xff\xff\xff",
    "huge declared str": b"\xdb\xff\xff\xff\xff" + b"a" * 10,
    "deep nesting": b"\x91" * 2000 + b"\xc0",
    "int key": raw({1: "x"}),
    "bytes key": raw({b"v": 1, b"id": "x", b"kind": "ping"}),
    "bad utf-8": b"\x81\xa1v\xa2\xff\xfe",
    "ext type": raw(msgpack.ExtType(5, b"xx")),
    "timestamp ext": raw({"v": 1, "id": msgpack.Timestamp(1, 0), "kind": "ping"}),
    "unknown version": raw({"v": 2, "id": "x", "kind": "ping"}),
    "no version": raw({"id": "x", "kind": "ping"}),
    "bool version": raw({"v": True, "id": "x", "kind": "ping"}),
    "unknown kind": raw({"v": 1, "id": "x", "kind": "shutdown"}),
    "empty id": raw({"v": 1, "id": "", "kind": "ping"}),
    "long id": raw({"v": 1, "id": "x" * 500, "kind": "ping"}),
    "int id": raw({"v": 1, "id": 5, "kind": "ping"}),
    "missing field": raw({"v": 1, "id": "x", "kind": "audit", "path": "a.c"}),
    "wrong field type": raw(protocol.make("audit", "a", **(UNIT | {"code": 12}))),
    "bytes for str": raw(protocol.make("audit", "a", **(UNIT | {"code": b"int x;"}))),
    "bad priority": raw(protocol.make("audit", "a", **(UNIT | {"priority": "urgent"}))),
    "bad severity": raw(protocol.make("explain", "a", **(UNIT | {"finding": FINDING | {"severity": "bad"}}))),
    "lines reversed": raw(protocol.make("explain", "a", **(UNIT | {"finding": FINDING | {"end_line": 1}}))),
    "nan confidence": raw(
        protocol.make("explain", "a", **(UNIT | {"finding": FINDING | {"confidence": float("nan")}}))
    ),
    "oversized frame": b"\x00" * (protocol.MAX_FRAME_BYTES + 1),
}


def _deep(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"k": out}
    return out


MALFORMED["deep free map"] = raw(protocol.make("tool_request", "a", call="c", tool="grep", args=_deep(40)))


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_frames_raise_the_one_error(name):
    with pytest.raises(ProtocolError):
        protocol.decode(MALFORMED[name], "to_daemon" if "tool_request" not in name else "to_client")


def test_deep_free_map_is_refused_in_its_direction():
    with pytest.raises(ProtocolError, match="nested deeper"):
        protocol.decode(MALFORMED["deep free map"], "to_client")


def test_client_kinds_are_not_accepted_by_the_daemon():
    with pytest.raises(ProtocolError, match="unknown kind"):
        protocol.decode(protocol.encode(protocol.make("pong", "p")), "to_daemon")


def test_encode_refuses_what_it_cannot_send():
    with pytest.raises(ProtocolError):
        protocol.encode({"x": object()})
    with pytest.raises(ProtocolError):
        protocol.encode({"x": "a" * (protocol.MAX_FRAME_BYTES + 1)})


def _only_protocol_errors(frame: bytes) -> None:
    for direction in ("to_daemon", "to_client"):
        try:
            message = protocol.decode(frame, direction)
        except ProtocolError:
            continue
        assert message["v"] == protocol.VERSION and message["kind"] in protocol.SCHEMAS[direction]


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=96))
def test_fuzz_random_frames(frame):
    _only_protocol_errors(frame)


VALID_FRAMES = [protocol.encode(protocol.make(k, "id-7", **f)) for d in EXAMPLES.values() for k, f in d.items()]


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(VALID_FRAMES),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8),
    st.integers(0, 10_000),
)
def test_fuzz_mutated_frames(frame, flips, cut):
    data = bytearray(frame)
    for pos, value in flips:
        data[pos % len(data)] = value
    _only_protocol_errors(bytes(data[: max(cut, 1)]) if cut < len(data) else bytes(data))


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=10,
)


def places(value, path=()):
    """The path (keys and list indices) of every value inside a message."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield (*path, key)
        yield from places(item, (*path, key))


MISSING = object()  # a fault that leaves the field out
WRONG = [MISSING, None, True, 0, -1, 2**64 - 1, 1.5, float("nan"), float("inf"), "", "x", b"x"]
WRONG += [[], [None], {}, {"": None}]
EXAMPLE_MESSAGES = [protocol.make(k, "x", **f) for kinds in EXAMPLES.values() for k, f in kinds.items()]


def with_fault(message: dict, path: tuple, value) -> dict:
    """A copy of message whose value at path is replaced by value (or left out, for MISSING)."""
    message = copy.deepcopy(message)
    *parent_path, key = path
    parent = functools.reduce(lambda node, k: node[k], parent_path, message)
    if value is not MISSING:
        parent[key] = value
    elif isinstance(parent, dict):
        parent.pop(key, None)
    else:
        del parent[key]
    return message


@pytest.mark.parametrize("message", EXAMPLE_MESSAGES, ids=lambda m: m["kind"])
def test_every_field_meets_every_wrong_value(message):
    """Each checker of the schema, at every depth, meets a value of every other type and a missing field."""
    for path in [*places(message), ("unknown",)]:
        for value in WRONG:
            _only_protocol_errors(raw(with_fault(message, path, value)))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EXAMPLE_MESSAGES), st.data())
def test_fuzz_structured_maps(message, data):
    """A valid message with one to three faults anywhere in it (a value replaced by anything, a field left
    out, an unknown field added): the faults together, which the test above meets one at a time."""
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([*places(message), ("unknown",)]))
        message = with_fault(message, path, data.draw(st.sampled_from(WRONG) | json_like))
    _only_protocol_errors(raw(message))
