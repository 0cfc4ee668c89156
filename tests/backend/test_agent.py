"""The audit loop, deterministic: scripted Kimi K3 turns forced through the real engine of a real daemon.

Every answer below is real tool-call text that the engine emits token by token (sampling, detokenizer,
stop token and the kimi_k3 parser all run); the test plays the editor, including the tool round trips.
"""

import pytest

from tests.support.daemon import Wire, audit_fields, serving
from tests.support.kimi import CLOSE_TOOLS, END, OPEN_TOOLS, call, finding, turn

F1 = finding()
F2 = finding(cwe=190, severity="medium", title="Integer overflow", start_line=1, end_line=1, confidence=0.5)
READ = ("read_lines", {"path": "src/f.c", "start": 1, "end": 4})
LOOP_TAIL = "x = x + 1;\n" * 60

SCRIPT = [
    {"unit": "two_findings", "turns": [turn(("report_finding", F1), ("report_finding", F2), content="Two bugs.")]},
    {"unit": "reader", "turns": [turn(READ), turn(("report_finding", F1))]},
    {"unit": "invalid", "turns": [
        OPEN_TOOLS + '<|open|>call tool="report_finding" index="1"<|sep|><|open|>json type="object"<|sep|>{not json'
        "<|close|>json<|sep|><|close|>call<|sep|>" + call("report_finding", finding(severity="urgent"), 2)
        + call("report_finding", F1, 3) + call("no_such_tool", {}, 4) + CLOSE_TOOLS + END]},
    {"unit": "rounds", "turns": [turn(READ)] * 5},
    {"unit": "streamed", "turns": [OPEN_TOOLS + call("report_finding", F1) + LOOP_TAIL]},
    {"unit": "explained", "turns": [turn(content="The length n reaches the copy unchecked; bound it first.")]},
    {"unit": "stray_lines", "turns": [turn(
        ("report_finding", finding(trace=[{"line": 1, "note": "in"}, {"line": 9, "note": "past the unit"}])),
        ("report_finding", finding(fix={"start_line": 2, "end_line": 7, "replacement": "x"})),
        ("report_finding", F1))]},
    {"unit": "explained_twice", "turns": [turn(READ, content="Let me look. "), turn(content="It is unchecked.")]},
    {"unit": "explained_tail", "turns": ["Compare n with the size <|"]},  # ends like a marker start, then eos
]


@pytest.fixture(scope="module")
def daemon(tiny_model):
    with serving(tiny_model, script=SCRIPT, args=["--max-tool-rounds", "2", "--max-tokens", "600"]) as d:
        yield d


def findings_of(messages):
    return [m["finding"] for m in messages if m["kind"] == "finding"]


async def test_report_finding_calls_become_findings(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "a1", **audit_fields("two_findings"))
    assert [m["kind"] for m in msgs].count("done") == 1 and msgs[-1]["kind"] == "done"
    assert findings_of(msgs) == [F1, F2 | {"trace": F2["trace"]}]
    stats = msgs[-1]["stats"]
    assert stats["findings"] == 2 and stats["invalid_tool_calls"] == 0 and stats["finish_reason"] == "stop"
    assert stats["rounds"] == 1 and stats["tool_calls"] == 0


async def test_read_lines_round_trip_continues_from_the_cache(daemon):
    source = "int f(int n)\n{\n\treturn n;\n}"
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "r1", tools={"read_lines": (True, source)}, **audit_fields("reader"))
    requests = [m for m in msgs if m["kind"] == "tool_request"]
    assert len(requests) == 1
    assert requests[0]["tool"] == "read_lines" and requests[0]["args"] == READ[1]
    # the finding comes from turn 2, i.e. after the tool result went back into the conversation
    kinds = [m["kind"] for m in msgs]
    assert kinds.index("tool_request") < kinds.index("finding") < kinds.index("done")
    stats = msgs[-1]["stats"]
    assert stats["finish_reason"] == "stop" and stats["tool_calls"] == 1 and stats["findings"] == 1
    first, second = stats["turns"]
    # turn 2 re-renders prompt + answer + tool result; the cache held everything before the tool result
    assert second["cached_tokens"] >= first["prompt_tokens"] + first["generated_tokens"] - 1
    assert second["prompt_tokens"] > second["cached_tokens"]


async def test_refused_tool_still_ends_cleanly(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "r2", tools={"read_lines": (False, "outside the workspace")},
                                  **audit_fields("reader", path="src/g.c"))
    assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["tool_calls"] == 1


async def test_invalid_tool_call_text_is_counted_not_fatal(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "i1", **audit_fields("invalid"))
    assert msgs[-1]["kind"] == "done"
    assert findings_of(msgs) == [F1]
    stats = msgs[-1]["stats"]
    # the unparsable call and the unknown tool are invalid calls; the bad severity is a dropped finding
    assert stats["invalid_tool_calls"] == 2 and stats["dropped_findings"] == 1 and stats["findings"] == 1


async def test_tool_round_budget(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "b1", tools={"read_lines": (True, "int x;")}, **audit_fields("rounds"))
    stats = msgs[-1]["stats"]
    assert msgs[-1]["kind"] == "done" and stats["finish_reason"] == "budget"
    assert stats["rounds"] == 3 and stats["tool_calls"] == 2  # --max-tool-rounds 2


async def test_token_budget(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "t1", **audit_fields("two_findings", max_tokens=10))
    stats = msgs[-1]["stats"]
    assert stats["finish_reason"] == "length" and stats["generated_tokens"] == 10 and stats["findings"] == 0


async def test_finding_is_sent_when_its_call_closes(daemon):
    # The tools section never closes and the generation ends on the loop guard: the finding can only
    # have come from parsing the call when it closed, mid-generation.
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "s1", **audit_fields("streamed"))
    assert findings_of(msgs) == [F1]
    stats = msgs[-1]["stats"]
    assert stats["finish_reason"] == "loop" and stats["invalid_tool_calls"] == 1  # the unclosed section


async def test_explain_streams_text(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("explain", "e1", finding=F1, **audit_fields("explained"))
    texts = [m["text"] for m in msgs if m["kind"] == "text"]
    assert "".join(texts) == "The length n reaches the copy unchecked; bound it first."
    assert len(texts) > 1  # streamed in pieces, not at the end
    assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["finish_reason"] == "stop"


async def test_explain_streams_every_round_and_flushes_a_held_tail(daemon):
    """Each generation streams its own prose (the text of round 2 starts empty again), and text held back
    because it could have begun a marker is sent when the generation ends."""
    async with Wire(daemon.endpoint) as wire:
        twice = await wire.request("explain", "e2", finding=F1, tools={"read_lines": (True, "int n;")},
                                   **audit_fields("explained_twice"))
        tail = await wire.request("explain", "e3", finding=F1, **audit_fields("explained_tail"))
    assert "".join(m["text"] for m in twice if m["kind"] == "text") == "Let me look. It is unchecked."
    assert twice[-1]["kind"] == "done" and twice[-1]["stats"]["rounds"] == 2
    assert "".join(m["text"] for m in tail if m["kind"] == "text") == "Compare n with the size <|"


async def test_findings_naming_lines_outside_the_unit_are_dropped(daemon):
    """Trace steps and fix ranges are checked against the unit too, not only the finding's own range."""
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "l1", **audit_fields("stray_lines"))
    assert findings_of(msgs) == [F1]
    assert msgs[-1]["stats"]["findings"] == 1 and msgs[-1]["stats"]["dropped_findings"] == 2
