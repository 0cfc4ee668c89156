"""Assistant turns as the model writes them, for `--script` files, in either dialect of the tiny checkpoint.

A scripted turn is the text generated after the generation prompt, so its shape depends on the renderer:

- ``k3`` (the release's format): the generation prompt opened the think channel, so a turn is the reasoning,
  the end of the think channel, the response channel, then the tool calls with typed arguments;
- ``jinja`` (the made-up template): the generation prompt opened the message only, so a turn is an optional
  think channel the model opens itself, bare response text, then the calls with JSON bodies.

Either way it ends with the end of the message; the engine's forcing adds the stop token.

`answer_tokens` gives the same from the other side: the token ids the checkpoint's own renderer gives an
assistant turn, an oracle that does not depend on how this module writes turns.
"""

import json

DIALECTS = ("k3", "jinja")
OPEN_TOOLS, CLOSE_TOOLS = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
OPEN_THINK, CLOSE_THINK = "<|open|>think<|sep|>", "<|close|>think<|sep|>"
OPEN_RESPONSE, CLOSE_RESPONSE = "<|open|>response<|sep|>", "<|close|>response<|sep|>"
END = "<|close|>message<|sep|>"


def call(name: str, arguments: dict, index: int = 1, dialect: str = "k3") -> str:
    """One tool call: typed arguments (k3) or a JSON object body (jinja)."""
    if dialect == "k3":
        from backend.tokenization_kimi import call as typed_call  # here: transformers, only where turns are made

        return typed_call({"name": name, "arguments": arguments}, index)
    body = json.dumps(arguments, ensure_ascii=False)
    return (
        f'<|open|>call tool="{name}" index="{index}"<|sep|><|open|>json type="object"<|sep|>{body}'
        "<|close|>json<|sep|><|close|>call<|sep|>"
    )


def tools(*calls: tuple[str, dict], dialect: str = "k3") -> str:
    """A tool-call section holding the calls, numbered from 1."""
    return OPEN_TOOLS + "".join(call(n, a, i, dialect) for i, (n, a) in enumerate(calls, 1)) + CLOSE_TOOLS


def opening(content: str = "", reasoning: str = "", dialect: str = "k3") -> str:
    """A turn up to its tool calls: the think channel and the response."""
    if dialect == "k3":
        return f"{reasoning}{CLOSE_THINK}{OPEN_RESPONSE}{content}{CLOSE_RESPONSE}"
    return (f"{OPEN_THINK}{reasoning}{CLOSE_THINK}" if reasoning else "") + content


def turn(*calls: tuple[str, dict], content: str = "", reasoning: str = "", dialect: str = "k3") -> str:
    """A whole assistant turn: reasoning, response, the calls in one tools section, the end of the message."""
    return opening(content, reasoning, dialect) + (tools(*calls, dialect=dialect) if calls else "") + END


def finding(**overrides) -> dict:
    """A valid report_finding argument map."""
    return {
        "cwe": 787,
        "severity": "high",
        "title": "Out-of-bounds write",
        "message": "n is not checked",
        "start_line": 2,
        "end_line": 3,
        "trace": [{"line": 1, "note": "n comes from the caller"}],
    } | overrides


def answer_tokens(
    tokenizer,
    messages: list[dict],
    tools: list[dict],
    effort: str,
    content: str = "",
    calls: list[dict] | None = None,
    reasoning: str = "",
) -> list[int]:
    """The tokens the model generates for an assistant turn (reasoning, content, then tool calls), as the
    renderer renders that turn after the generation prompt (the stop token last)."""
    from backend import prompts  # here: the turns above serve tests whose process never loads mlx

    prompt = prompts.template(tokenizer, messages, tools, add_generation_prompt=True, effort=effort)
    calls = [prompts.ToolCall(c["name"], c["arguments"], i) for i, c in enumerate(calls or [], 1)]
    turn = prompts.assistant_message(content, calls, reasoning)
    full = prompts.template(tokenizer, [*messages, turn], tools, add_generation_prompt=False, effort=effort)
    if full[: len(prompt)] != prompt:
        raise ValueError("the chat template does not render an assistant turn as an extension of the prompt")
    return full[len(prompt) :]
