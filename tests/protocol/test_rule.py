"""The `rule` request (issue 43, variants): the model writes a Coccinelle rule for a finding. Its schema bounds what
an editor may send (the earlier rules and what spatch said of each) and names the field and the limit it broke."""

import pytest

from k3lsp.wire import protocol
from k3lsp.wire.protocol import ProtocolError

FINDING = {
    "cwe": 476,
    "severity": "high",
    "title": "NULL dereference after kmalloc",
    "message": "kmalloc may return NULL; p->len is written unchecked",
    "start_line": 3,
    "end_line": 4,
}
RULE = "@@\nexpression E;\n@@\n* E = kmalloc(...);\n* E->f\n"
REQUEST = {
    "path": "drivers/x.c",
    "unit": "x_probe",
    "code": "int x_probe(void)\n{\n\tstruct s *p = kmalloc(8, GFP_KERNEL);\n\tp->len = 1;\n}\n",
    "context": "#include <linux/slab.h>",
    "finding": FINDING,
    "tries": [{"rule": RULE, "outcome": "did not match line 3"}],
    "thinking_effort": "off",
    "max_tokens": 512,
}


def decode(**changes) -> dict:
    fields = {k: v for k, v in (REQUEST | changes).items() if v is not None}
    return protocol.decode(protocol.encode(protocol.make("rule", "r1", **fields)), "to_daemon")


def test_a_rule_request_round_trips_with_its_tries():
    message = decode()
    assert message["kind"] == "rule" and message["tries"] == REQUEST["tries"]
    assert message["finding"]["title"] == FINDING["title"] and message["finding"]["trace"] == []


def test_tries_are_optional_and_a_first_request_has_none():
    assert "tries" not in decode(tries=None)
    assert decode(tries=[])["tries"] == []


def test_a_daemon_never_accepts_it_as_a_reply():
    with pytest.raises(ProtocolError, match="unknown kind 'rule' for to client"):
        protocol.decode(protocol.encode(protocol.make("rule", "r1", **REQUEST)), "to_client")


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"finding": None}, r"^finding: missing$"),
        ({"finding": FINDING | {"end_line": 1}}, r"^finding: end_line is before start_line$"),
        (
            {"tries": [{"rule": RULE}] * (protocol.MAX_RULE_TRIES + 1)},
            rf"^tries: more than {protocol.MAX_RULE_TRIES} items$",
        ),
        (
            {"tries": [{"rule": "x" * (protocol.MAX_RULE_CHARS + 1), "outcome": "parse error"}]},
            rf"^tries\[0\]\.rule: longer than {protocol.MAX_RULE_CHARS} characters$",
        ),
        (
            {"tries": [{"rule": RULE, "outcome": "e" * (protocol.MAX_RULE_OUTCOME_CHARS + 1)}]},
            rf"^tries\[0\]\.outcome: longer than {protocol.MAX_RULE_OUTCOME_CHARS} characters$",
        ),
        ({"tries": [{"rule": RULE, "outcome": ""}]}, r"^tries\[0\]\.outcome: must not be empty$"),
        ({"tries": [{"rule": RULE}]}, r"^tries\[0\]\.outcome: missing$"),
        ({"tries": [RULE]}, r"^tries\[0\]: expected a map, got str$"),
        ({"tries": {"rule": RULE, "outcome": "x"}}, r"^tries: expected a list, got dict$"),
        ({"thinking_effort": "medium"}, r"^thinking_effort: 'medium' is not one of off, low, high, max$"),
        ({"max_tokens": 0}, r"^max_tokens: 0 is outside \[1, 1000000\]$"),
        ({"code": 7}, r"^code: expected a string, got int$"),
    ],
    ids=[
        "no finding",
        "finding lines reversed",
        "too many tries",
        "oversize rule",
        "oversize outcome",
        "empty outcome",
        "outcome missing",
        "a try that is not a map",
        "tries not a list",
        "unknown effort",
        "zero tokens",
        "code not text",
    ],
)
def test_malformed_rule_requests_are_refused_naming_the_field(changes, error):
    with pytest.raises(ProtocolError, match=error):
        decode(**changes)
