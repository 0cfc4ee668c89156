"""Every token of a rendered session, classified as tool call, think, response or other.

The card reports divergence per span because the spans behave differently: tool-call tokens stay close
to the full model, thinking drifts. The spans come from the Kimi K3 tag structure on the token ids:
`<|open|>NAME ...<|sep|>` opens a tag and `<|close|>NAME<|sep|>` closes it, where `<|open|>`, `<|close|>`
and `<|sep|>` are single special tokens and NAME is spelled by ordinary tokens in between.

- tool_call: `<|open|>tools<|sep|>` ... `<|close|>tools<|sep|>`, both tags included;
- think: `<|open|>think<|sep|>` ... `<|close|>think<|sep|>`, tags included;
- response: `<|open|>response<|sep|>` ... `<|close|>response<|sep|>`, tags included, and the text of an
  assistant message outside any tag (a template that does not wrap the answer in response tags);
- other: everything else - system, user and tool messages, and the message tags themselves.

The innermost of tools/think/response wins. The scan never fails: a close tag without its open tag is
ignored, and an open tag left unclosed at the end of the session runs to the end.
"""

import re

SPANS = ("tool_call", "think", "response", "other")
TOOL_CALL, THINK, RESPONSE, OTHER = range(len(SPANS))
_TAG_SPANS = {"tools": TOOL_CALL, "think": THINK, "response": RESPONSE}
_ROLE = re.compile(r'\brole="([^"]*)"')

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"


def tag_ids(tokenizer) -> tuple[int, int, int]:
    """Ids of `<|open|>`, `<|close|>`, `<|sep|>`; a clear error for a tokenizer without the Kimi K3 tags."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in (OPEN, CLOSE, SEP) if t not in vocab]
    if missing:
        raise ValueError(f"the tokenizer has no single token for {', '.join(missing)}: not a Kimi K3 tokenizer")
    return vocab[OPEN], vocab[CLOSE], vocab[SEP]


def classify(tokenizer, ids: list[int]) -> list[int]:
    """One span index (into SPANS) per token of `ids`, a whole rendered session."""
    open_id, close_id, sep_id = tag_ids(tokenizer)
    labels = [OTHER] * len(ids)
    stack: list[str] = []  # open tags, innermost last: "tools", "think", "message:assistant", ...
    i = 0
    while i < len(ids):
        if ids[i] not in (open_id, close_id):
            labels[i] = _content_label(stack)
            i += 1
            continue
        end = _find(ids, sep_id, i + 1, stop=(open_id, close_id))
        header = tokenizer.decode(ids[i + 1 : end])
        name = _tag_name(header)
        if ids[i] == open_id:
            stack.append(name)
            label = _tag_label(stack)
        else:
            top = _innermost(stack, name.split(":")[0])
            label = _tag_label(stack if top is None else stack[: top + 1])
            del stack[len(stack) if top is None else top :]
        last = min(end, len(ids) - 1)
        labels[i : last + 1] = [label] * (last + 1 - i)
        i = last + 1
    return labels


def _find(ids: list[int], target: int, start: int, stop: tuple[int, int]) -> int:
    """Index of `target` from `start`, or the index before the next tag start / the end if it never comes."""
    for j in range(start, len(ids)):
        if ids[j] == target:
            return j
        if ids[j] in stop:
            return j - 1
    return len(ids) - 1


def _tag_name(header: str) -> str:
    word = header.strip().split(None, 1)
    name = word[0] if word else ""
    if name == "message":
        role = _ROLE.search(header)
        return f"message:{role.group(1) if role else ''}"
    return name


def _innermost(stack: list[str], base: str) -> int | None:
    """Index of the innermost open tag `base` (a close tag names no role), or None."""
    for i in range(len(stack) - 1, -1, -1):
        if stack[i].split(":")[0] == base:
            return i
    return None


def _tag_label(stack: list[str]) -> int:
    """The span of a tag token: the innermost span tag on the stack (message tags are `other`)."""
    for name in reversed(stack):
        if name in _TAG_SPANS:
            return _TAG_SPANS[name]
    return OTHER


def _content_label(stack: list[str]) -> int:
    """The span of a token between tags: as for tags, except that bare assistant text is the response."""
    label = _tag_label(stack)
    if label == OTHER and stack and stack[-1] == "message:assistant":
        return RESPONSE
    return label
