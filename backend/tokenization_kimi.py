"""The tokenizer class `k3-backend make-tiny` ships as the checkpoint's `tokenization_kimi.py` (remote code).

The released Kimi K3 has no Jinja chat template: a tokenizer class in the model repo renders the prompt in
Python and is loaded through `auto_map` with `trust_remote_code` (docs/engine.md). The tiny checkpoint is
packaged the same way, so the daemon meets a release-shaped checkpoint in tests: this file is copied next to
the weights and imported by transformers from there, never from this package. It therefore imports nothing
but transformers and the standard library.

`apply_chat_template(messages, tools=, add_generation_prompt=, thinking=, thinking_effort=)` renders:

- a `type="tool-declare"` system block with the tools as sorted compact JSON, when tools are given;
- a `type="thinking-effort"` system block naming the effort, when thinking is on;
- every message as `<|open|>message ATTRS<|sep|>BODY<|close|>message<|sep|><|end_of_msg|>`; a tool result
  carries `role="tool" name="TOOL"`;
- an assistant message as a think channel (its `reasoning_content`, or empty), a response channel (its
  `content`) and its calls with typed `argument` blocks;
- the generation prompt: the opened assistant message and its opened think channel (thinking on) or its
  opened response channel (thinking off).
"""

from __future__ import annotations

import json
from typing import Any

from transformers import PreTrainedTokenizerFast

EFFORTS = ("low", "high", "max")  # what the encoder accepts; the effort block's prose also names medium
OPEN, CLOSE, SEP, END = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"

TOOLS_HEADING = "# Tools"
TOOLS_SENTENCE = "You may call the tools below. They are described in JSONSchema:"
EFFORT_SENTENCE = "Think before you answer, at thinking effort {effort} (one of low, medium, high or max)."


def attr(value: Any) -> str:
    """An attribute value, escaped the way mlx-lm's kimi_k3 parser unescapes it."""
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def tag(kind: str, body: str, **attrs: Any) -> str:
    head = "".join(f' {k}="{attr(v)}"' for k, v in attrs.items())
    return f"{OPEN}{kind}{head}{SEP}{body}{CLOSE}{kind}{SEP}"


def message(body: str, **attrs: Any) -> str:
    return tag("message", body, **attrs) + END


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _argument_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def argument(key: str, value: Any) -> str:
    kind = _argument_type(value)
    text = value if kind == "string" else json.dumps(value, ensure_ascii=False)
    return tag("argument", text, key=key, type=kind)


def call(spec: dict, index: int) -> str:
    """One tool call with typed arguments; ``spec`` is ``{"name", "arguments"}``, or a ``tool_calls`` item."""
    function = spec.get("function", spec)
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    body = "".join(argument(k, v) for k, v in arguments.items())
    return tag("call", body, tool=function["name"], index=index)


def _assistant(m: dict) -> str:
    body = tag("think", m.get("reasoning_content") or "") + tag("response", m.get("content") or "")
    if m.get("tool_calls"):
        body += tag("tools", "".join(call(c, i) for i, c in enumerate(m["tool_calls"], 1)))
    return message(body, role="assistant")


def _message(m: dict) -> str:
    role = m["role"]
    if role == "assistant":
        return _assistant(m)
    content = m.get("content") or ""
    if not isinstance(content, str):
        raise ValueError(f"{role} message content must be text")
    if role == "tool":
        return message(content, role="tool", name=m.get("name") or "")
    if role not in ("system", "user"):
        raise ValueError(f"unknown role {role!r}")
    return message(content, role=role)


def render(
    messages: list[dict],
    tools: list[dict] | None = None,
    *,
    add_generation_prompt: bool = False,
    thinking: bool = True,
    thinking_effort: str | None = "max",
) -> str:
    """The prompt text of a conversation in the Kimi K3 format."""
    effort = thinking_effort or "max"
    if thinking and effort not in EFFORTS:
        raise ValueError(f"thinking_effort must be one of {', '.join(EFFORTS)}, got {effort!r}")
    out = []
    if tools:
        schemas = [t.get("function", t) for t in tools]
        body = f"{TOOLS_HEADING}\n{TOOLS_SENTENCE}\n```json\n{_json(schemas)}\n```"
        out.append(message(body, role="system", type="tool-declare"))
    if thinking:
        out.append(message(EFFORT_SENTENCE.format(effort=effort), role="system", type="thinking-effort"))
    out += [_message(m) for m in messages]
    if add_generation_prompt:
        channel = "think" if thinking else "response"
        out.append(f'{OPEN}message role="assistant"{SEP}{OPEN}{channel}{SEP}')
    return "".join(out)


class KimiK3Tokenizer(PreTrainedTokenizerFast):
    """A fast BPE tokenizer whose chat template is the Python renderer above."""

    def apply_chat_template(
        self,
        conversation: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        thinking: bool = True,
        thinking_effort: str | None = "max",
        tokenize: bool = True,
        **kwargs: Any,
    ):
        text = render(
            conversation,
            tools,
            add_generation_prompt=add_generation_prompt,
            thinking=thinking,
            thinking_effort=thinking_effort,
        )
        if not tokenize:
            return text
        return self.encode(text, add_special_tokens=False)
