"""Span labels of a rendered session computed on the TEXT, independently of backend.fidelity.spans.

The scanner under test works on token ids with a tag stack; this oracle finds the sections in the
rendered text with regular expressions and maps characters to tokens through the tokenizer's offsets,
so the two agree only if the scanner draws the span boundaries where the text says they are.
"""

import re

from backend.fidelity.spans import SPANS

_SECTION = re.compile(r"<\|open\|>(tools|think|response)<\|sep\|>.*?<\|close\|>\1<\|sep\|>", re.S)
_ASSISTANT = re.compile(r'<\|open\|>message role="assistant"<\|sep\|>(.*?)<\|close\|>message<\|sep\|>', re.S)
_NAMES = {"tools": "tool_call", "think": "think", "response": "response"}


def expected_labels(tokenizer, messages: list[dict], tools: list[dict], effort: str) -> tuple[list[int], list[int]]:
    """(token ids, span index per token) of the session rendered by the chat template at thinking ``effort``."""
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, thinking_effort=effort)
    chars = ["other"] * len(text)
    for m in _ASSISTANT.finditer(text):  # bare assistant text is the response...
        chars[m.start(1) : m.end(1)] = ["response"] * (m.end(1) - m.start(1))
    for m in _SECTION.finditer(text):  # ...unless a section claims it
        chars[m.start() : m.end()] = [_NAMES[m.group(1)]] * (m.end() - m.start())
    enc = tokenizer._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [SPANS.index(chars[start]) for start, _ in enc["offset_mapping"]]
