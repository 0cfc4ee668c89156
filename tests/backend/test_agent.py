"""The audit loop, deterministic: scripted turns forced through the real engine of a real daemon, on both
dialects of the tiny checkpoint (the release's Python renderer and a Jinja template).

Every answer below is real text that the engine emits token by token (sampling, detokenizer, stop token,
channel reading and the kimi_k3 parser all run); the test plays the editor, including the tool round trips.
"""

import pytest

from backend.agent import ProgressPace
from backend.dist import load_tokenizer
from backend.fidelity.spans import THINK
from backend.fidelity.traces import session_window
from backend.prompts import AUDIT_TOOLS
from tests.support.daemon import Wire, audit_fields, serving
from tests.support.kimi import CLOSE_TOOLS, END, OPEN_TOOLS, call, finding, opening, tools, turn

F1 = finding()
F2 = finding(cwe=190, severity="medium", title="Integer overflow", start_line=1, end_line=1, confidence=0.5)
READ = ("read_lines", {"path": "src/f.c", "start": 1, "end": 4})
LOOP_TAIL = "x = x + 1;\n" * 60
WHY = "n reaches the copy; nothing bounds it by the buffer size."
EXPLANATION = "The length n reaches the copy unchecked; bound it first."
SOURCE = "int f(int n)\n{\n\treturn n;\n}"


def script(d: str) -> list[dict]:
    """The scripted turns, written in dialect ``d``."""

    def t(*calls, **kw):
        return turn(*calls, dialect=d, **kw)

    bad_json = (
        '<|open|>call tool="report_finding" index="1"<|sep|><|open|>json type="object"<|sep|>{not json'
        "<|close|>json<|sep|><|close|>call<|sep|>"
    )
    think_calls = tools(READ, ("report_finding", F1), dialect="jinja")  # written while thinking
    return [
        {
            "unit": "two_findings",
            "turns": [t(("report_finding", F1), ("report_finding", F2), content="Two bugs.", reasoning=WHY)],
        },
        {
            "unit": "reader",
            "turns": [
                t(READ, reasoning="Who calls f?", content="Let me read f."),
                t(("report_finding", F1), reasoning=WHY, content="One bug."),
            ],
        },
        {
            "unit": "invalid",
            "turns": [
                opening(dialect=d)
                + OPEN_TOOLS
                + bad_json
                + call("report_finding", finding(severity="urgent"), 2, d)
                + call("report_finding", F1, 3, d)
                + call("no_such_tool", {}, 4, d)
                + CLOSE_TOOLS
                + END
            ],
        },
        {"unit": "rounds", "turns": [t(READ)] * 5},
        {"unit": "streamed", "turns": [opening(dialect=d) + OPEN_TOOLS + call("report_finding", F1, 1, d) + LOOP_TAIL]},
        {"unit": "explained", "turns": [t(content=EXPLANATION, reasoning="Say where n comes from.")]},
        {
            "unit": "stray_lines",
            "turns": [
                t(
                    (
                        "report_finding",
                        finding(trace=[{"line": 1, "note": "in"}, {"line": 9, "note": "past the unit"}]),
                    ),
                    ("report_finding", finding(fix={"start_line": 2, "end_line": 7, "replacement": "x"})),
                    ("report_finding", F1),
                )
            ],
        },
        {"unit": "explained_twice", "turns": [t(READ, content="Let me look. "), t(content="It is unchecked.")]},
        {"unit": "explained_tail", "turns": [opening("Compare n with the size <|", dialect=d)]},  # then eos
        {"unit": "reviewed", "turns": [t(("report_finding", finding(introduced=True)))]},
        {
            "unit": "thinks_calls",
            "turns": [t(reasoning=f"Perhaps {think_calls} no, nothing to report.", content="Nothing found.")],
        },
    ]


@pytest.fixture(scope="module")
def daemon(checkpoint):
    with serving(
        checkpoint.path,
        script=script(checkpoint.dialect),
        args=["--max-tool-rounds", "2", "--effort-tokens", "low=1500"],
    ) as d:
        yield d


def findings_of(messages):
    return [m["finding"] for m in messages if m["kind"] == "finding"]


async def test_report_finding_calls_become_findings_with_their_reasoning(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "a1", **audit_fields("two_findings"))
    assert [m["kind"] for m in msgs].count("done") == 1 and msgs[-1]["kind"] == "done"
    assert findings_of(msgs) == [F1 | {"reasoning": WHY}, F2 | {"reasoning": WHY}]
    stats = msgs[-1]["stats"]
    assert stats["findings"] == 2 and stats["invalid_tool_calls"] == 0 and stats["finish_reason"] == "stop"
    assert stats["rounds"] == 1 and stats["tool_calls"] == 0
    assert stats["reasoning_tokens"] > 0 and stats["response_tokens"] > 0
    assert stats["reasoning_tokens"] + stats["response_tokens"] == stats["generated_tokens"]


async def test_read_lines_round_trip_appends_and_continues_from_the_cache(daemon, checkpoint):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "r1", tools={"read_lines": (True, SOURCE)}, **audit_fields("reader"))
        status = (await wire.ask("status", "st"))["status"]
    requests = [m for m in msgs if m["kind"] == "tool_request"]
    assert len(requests) == 1
    assert requests[0]["tool"] == "read_lines" and requests[0]["args"] == READ[1]
    # the finding comes from turn 2, i.e. after the tool result went back into the conversation
    kinds = [m["kind"] for m in msgs]
    assert kinds.index("tool_request") < kinds.index("finding") < kinds.index("done")
    assert findings_of(msgs) == [F1 | {"reasoning": WHY}]
    stats = msgs[-1]["stats"]
    assert stats["finish_reason"] == "stop" and stats["tool_calls"] == 1 and stats["findings"] == 1
    first, second = stats["turns"]
    # round 2 = round 1's prompt + its generated tokens (stop token included) + the tool turn: only that is new
    assert second["cached_tokens"] >= first["prompt_tokens"] + first["generated_tokens"]
    assert second["prompt_tokens"] > second["cached_tokens"]
    assert first["reasoning_tokens"] > 0 and second["reasoning_tokens"] > 0
    assert status["reasoning_tokens"] >= stats["reasoning_tokens"] > 0
    assert status["response_tokens"] >= stats["response_tokens"] > 0


async def test_history_keeps_reasoning_apart_and_content_free_of_markers(daemon, checkpoint):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request(
            "audit", "h1", tools={"read_lines": (True, SOURCE)}, **audit_fields("reader", path="src/h.c")
        )
    assert msgs[-1]["kind"] == "done"
    (session,) = [s for s in daemon.sessions("reader") if any("src/h.c" in m["content"] for m in s["messages"])]
    assistants = [m for m in session["messages"] if m["role"] == "assistant"]
    assert [(m["reasoning_content"], m["content"]) for m in assistants] == [
        ("Who calls f?", "Let me read f."),
        (WHY, "One bug."),
    ]
    assert [m["tool_calls"][0]["function"]["name"] for m in assistants] == ["read_lines", "report_finding"]
    for m in assistants:
        assert "<|" not in m["content"] and "<|" not in m["reasoning_content"]
    assert session["thinking_effort"] == "low"
    assert [m["role"] for m in session["messages"]][-3:] == ["assistant", "tool", "assistant"]
    if checkpoint.dialect == "k3":  # `fidelity record --traces` scores this session with its think span
        tok = load_tokenizer(str(checkpoint.path), trust_remote_code=True)
        window = session_window(tok, "trace", session, 8192, AUDIT_TOOLS)
        thought = "".join(tok.decode([t]) for t, label in zip(window.ids, window.labels, strict=True) if label == THINK)
        assert "Who calls f?" in thought and WHY in thought


async def test_a_tool_call_inside_the_think_channel_is_never_run(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "k1", tools={"read_lines": (True, SOURCE)}, **audit_fields("thinks_calls"))
    assert [m["kind"] for m in msgs if m["kind"] in ("tool_request", "finding")] == []
    stats = msgs[-1]["stats"]
    assert msgs[-1]["kind"] == "done" and stats["finish_reason"] == "stop" and stats["rounds"] == 1
    assert stats["think_tool_calls"] == 2 and stats["tool_calls"] == 0 and stats["findings"] == 0
    (session,) = daemon.sessions("thinks_calls")
    assert session["messages"][-1]["content"] == "Nothing found." and "tool_calls" not in session["messages"][-1]


async def test_refused_tool_still_ends_cleanly(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request(
            "audit",
            "r2",
            tools={"read_lines": (False, "outside the workspace")},
            **audit_fields("reader", path="src/g.c"),
        )
    assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["tool_calls"] == 1


async def test_invalid_tool_call_text_is_counted_not_fatal(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "i1", **audit_fields("invalid"))
    assert msgs[-1]["kind"] == "done"
    assert findings_of(msgs) == [F1]  # no reasoning written: none carried
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


async def test_thinking_effort_chooses_the_budget_and_the_prompt(daemon, checkpoint):
    async with Wire(daemon.endpoint) as wire:
        low = await wire.request("audit", "e1", **audit_fields("two_findings", thinking_effort="low"))
        off = await wire.request("audit", "e2", **audit_fields("two_findings", thinking_effort="off"))
    assert low[-1]["stats"]["thinking_effort"] == "low" and off[-1]["stats"]["thinking_effort"] == "off"
    assert low[-1]["stats"]["token_budget"] == 1500  # --effort-tokens low=1500
    assert off[-1]["stats"]["token_budget"] == 1024  # off's default budget
    low_prompt, off_prompt = (r[-1]["stats"]["turns"][0]["prompt_tokens"] for r in (low, off))
    if checkpoint.dialect == "k3":  # the effort block is in the prompt at low, not at off
        assert low_prompt > off_prompt
    else:  # the Jinja template ignores the effort
        assert low_prompt == off_prompt


async def test_finding_is_sent_when_its_call_closes(daemon):
    # The tools section never closes and the generation ends on the loop guard: the finding can only
    # have come from parsing the call when it closed, mid-generation.
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "s1", **audit_fields("streamed"))
    assert findings_of(msgs) == [F1]
    stats = msgs[-1]["stats"]
    assert stats["finish_reason"] == "loop" and stats["invalid_tool_calls"] == 1  # the unclosed section


async def test_explain_streams_the_response_channel_only(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("explain", "e1", finding=F1, **audit_fields("explained"))
    texts = [m["text"] for m in msgs if m["kind"] == "text"]
    assert "".join(texts) == EXPLANATION  # no reasoning, no channel markers
    assert len(texts) > 1  # streamed in pieces, not at the end
    assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["finish_reason"] == "stop"
    assert msgs[-1]["stats"]["reasoning_tokens"] > 0


async def test_explain_streams_every_round_and_flushes_a_held_tail(daemon):
    """Each generation streams its own response, and text held back because it could have begun a marker is
    sent when the generation ends."""
    async with Wire(daemon.endpoint) as wire:
        twice = await wire.request(
            "explain", "e2", finding=F1, tools={"read_lines": (True, "int n;")}, **audit_fields("explained_twice")
        )
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


def test_progress_is_paced_per_stage():
    """At most one progress message per PROGRESS_EVERY and stage; the first of a stage always goes out."""
    slow, fast = ProgressPace(every=3600), ProgressPace(every=0)
    assert [slow.due(s) for s in ("prefill", "prefill", "decode", "decode", "decode")] == [
        True,
        False,
        True,
        False,
        False,
    ]
    assert all(fast.due("decode") for _ in range(3))


async def test_introduced_is_kept_only_under_review_and_the_prompt_shows_the_change(daemon):
    """An audit with ``changes`` shows the model the function before the change and marks the changed lines in
    the gutter; only then may a finding say the change introduced it (the same call without a change in view
    loses the field)."""
    before = "int f(int n)\n{\n\treturn 0;\n}"
    async with Wire(daemon.endpoint) as wire:
        reviewed = await wire.request(
            "audit", "r1", **audit_fields("reviewed", changes={"lines": [3], "preimage": before})
        )
        plain = await wire.request("audit", "r2", **audit_fields("reviewed"))
    assert [f.get("introduced") for f in findings_of(reviewed)] == [True]
    assert [f.get("introduced", "absent") for f in findings_of(plain)] == ["absent"]
    first, second = (s["messages"] for s in daemon.sessions("reviewed"))
    shown = next(m["content"] for m in first if m["role"] == "user" and "Unit `reviewed`" in m["content"])
    assert f"Before the change under review, `reviewed` read:\n```c\n{before}\n```" in shown
    assert "1|int f(int n)\n2|{\n3+|\treturn n;\n4|}" in shown
    plain_shown = next(m["content"] for m in second if m["role"] == "user" and "Unit `reviewed`" in m["content"])
    assert "3|\treturn n;" in plain_shown and "+|" not in plain_shown and "Before the change" not in plain_shown
