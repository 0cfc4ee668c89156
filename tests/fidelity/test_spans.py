"""Span classification on token ids against the text-level oracle, and its leniency on broken markup."""

import pytest

from backend.dist import load_tokenizer
from backend.fidelity.spans import OTHER, RESPONSE, SPANS, THINK, TOOL_CALL, classify
from backend.fidelity.traces import TraceError, read_sessions, session_window
from backend.prompts import AUDIT_TOOLS
from tests.support.spans_oracle import expected_labels


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(str(tiny_model), trust_remote_code=True)


def test_known_session_spans_match_the_text(tokenizer, trace_file):
    ((source, session),) = read_sessions(trace_file)
    ids, expected = expected_labels(tokenizer, session["messages"], AUDIT_TOOLS, session["thinking_effort"])
    window = session_window(tokenizer, source, session, len(ids), AUDIT_TOOLS)
    assert window.ids == ids
    assert window.labels == expected
    assert {SPANS[k] for k in expected} == set(SPANS)  # the session exercises every span


def test_a_short_window_keeps_the_end_and_the_labels_of_the_whole_session(tokenizer, trace_file):
    ((source, session),) = read_sessions(trace_file)
    ids, expected = expected_labels(tokenizer, session["messages"], AUDIT_TOOLS, session["thinking_effort"])
    window = session_window(tokenizer, source, session, 40, AUDIT_TOOLS)
    assert window.ids == ids[-40:]
    assert window.labels == expected[-40:]
    assert window.prompt == list(
        tokenizer.apply_chat_template(
            session["messages"][:2], tools=AUDIT_TOOLS, add_generation_prompt=True, thinking_effort="high"
        )
    )


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_unclosed_and_stray_tags_do_not_break_the_scan(tokenizer):
    think = _ids(tokenizer, "<|open|>think<|sep|>abc")
    stray = _ids(tokenizer, "<|close|>tools<|sep|>x")
    assert classify(tokenizer, think) == [THINK] * len(think)
    assert classify(tokenizer, stray) == [OTHER] * len(stray)
    nested = _ids(tokenizer, '<|open|>message role="assistant"<|sep|>hi<|open|>tools<|sep|>{}<|close|>tools<|sep|>')
    labels = classify(tokenizer, nested)
    assert labels[-1] == TOOL_CALL and RESPONSE in labels and labels[0] == OTHER


def test_a_tokenizer_without_the_tags_is_refused(tokenizer):
    class Plain:
        def get_vocab(self):
            return {"a": 0}

    with pytest.raises(ValueError, match="not a Kimi K3 tokenizer"):
        classify(Plain(), [0])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "known.jsonl:1: not JSON"),
        ('{"messages": []}', "non-empty"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "message 0: needs a role"),
        (
            '{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "grep", "arguments": "{x"}}]}]}',
            "tool call 0: arguments are not JSON",
        ),
    ],
)
def test_bad_traces_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "known.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceError, match=message):
        list(read_sessions(path))
