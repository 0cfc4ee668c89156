"""What the model is told, and how its answers are read back.

Prompts go through the model's own chat template only (`tokenizer.apply_chat_template` with the tool
schemas): that is the structure the pruned model was calibrated on. The audited code and its file
context are data in user turns, never in the system prompt, and any chat-markup tags inside them are
defused so a source file cannot close a message or open a tool call.

A prompt is rendered as system (+ tools) | file context | unit, each its own message, so the token
offsets between them are exact message boundaries: the engine stores prompt caches there, and every
unit of one file reuses the system and context prefill.

The model reports findings and asks for code by tool calls in the Kimi K3 format, read with mlx-lm's
`kimi_k3` tool parser. Reading never raises: text that is not a valid call becomes a `ToolCallError`.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from mlx_lm.tool_parsers import kimi_k3

PROMPT_VERSION = "k3lsp-audit-1"

SYSTEM_PROMPT = (
    "You are a security auditor for C code. Find memory-safety, integer, concurrency, input-validation "
    "and privilege bugs in the unit the user gives you. Report every real vulnerability by calling "
    "report_finding once per bug, with line numbers counted from 1 at the first line of the unit. "
    "If you need code that is not shown, call read_lines, find_definition or grep. Do not report style "
    "issues. Do not write an essay: when every finding is reported, end your turn."
)

EXPLAIN_SYSTEM_PROMPT = (
    "You are a security auditor for C code. Explain the given finding to the developer in at most five "
    "short sentences: the faulty data flow, how it can be triggered, and how to fix it. You may call "
    "read_lines or find_definition if you need more code."
)

_LINE = {"type": "integer", "minimum": 1}


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}


REPORT_FINDING = _tool(
    "report_finding",
    "Report one vulnerability in the audited unit. Lines are 1-based and relative to the unit.",
    {
        "cwe": {"type": "integer", "minimum": 1, "description": "CWE id, e.g. 787"},
        "severity": {"type": "string", "enum": ["critical", "high", "medium", "low", "info"]},
        "title": {"type": "string", "maxLength": 200},
        "message": {"type": "string", "description": "what is wrong and why it is exploitable"},
        "start_line": _LINE,
        "end_line": _LINE,
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "trace": {"type": "array", "maxItems": 64, "description": "the data flow, source to sink",
                  "items": {"type": "object", "properties": {"line": _LINE, "note": {"type": "string"}},
                            "required": ["line", "note"]}},
        "fix": {"type": "object", "description": "replacement text for a line range of the unit",
                "properties": {"start_line": _LINE, "end_line": _LINE, "replacement": {"type": "string"}},
                "required": ["start_line", "end_line", "replacement"]},
    },
    ["cwe", "severity", "title", "message", "start_line", "end_line", "trace"],
)
READ_LINES = _tool(
    "read_lines", "Read lines start..end (1-based, inclusive) of a workspace file.",
    {"path": {"type": "string"}, "start": _LINE, "end": _LINE}, ["path", "start", "end"],
)
FIND_DEFINITION = _tool(
    "find_definition", "Find where a function, macro, type or global is defined in the workspace.",
    {"symbol": {"type": "string"}}, ["symbol"],
)
GREP = _tool(
    "grep", "Search the workspace for a regular expression; optionally only under one path.",
    {"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"],
)

AUDIT_TOOLS = [REPORT_FINDING, READ_LINES, FIND_DEFINITION, GREP]
EXPLAIN_TOOLS = [READ_LINES, FIND_DEFINITION]

# The tag tokens of the Kimi K3 markup; inside data they are broken by a word joiner (U+2060).
_TAGS = ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")


def defuse(text: str) -> str:
    """Data as the model may see it: markup tags cannot end a message or forge a tool call."""
    for tag in _TAGS:
        if tag in text:
            text = text.replace(tag, "<\u2060" + tag[1:])
    return text


def numbered(code: str) -> str:
    """The unit with 1-based line numbers, the numbering findings use."""
    lines = code.splitlines() or [""]
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}}| {line}" for i, line in enumerate(lines, 1))


def _context_message(path: str, context: str) -> dict:
    return {"role": "user", "content": defuse(
        f"File: {path}\nDeclarations this file's units use (context only, do not audit):\n```c\n{context}\n```"
    )}


def _unit_text(path: str, unit: str, code: str, first_line: int | None) -> str:
    where = f" (line {first_line} of the file)" if first_line else ""
    return f"Unit `{unit}` from {path}{where}, numbered from 1:\n```c\n{numbered(code)}\n```"


def audit_messages(*, path: str, unit: str, code: str, context: str = "",
                   first_line: int | None = None) -> list[dict]:
    """System | file context (if any) | unit: the conversation that starts the audit of one unit."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    if context.strip():
        messages.append(_context_message(path, context))
    messages.append({"role": "user", "content": defuse(
        _unit_text(path, unit, code, first_line) + "\nAudit this unit and report each vulnerability."
    )})
    return messages


def explain_messages(*, path: str, unit: str, code: str, finding: dict, context: str = "") -> list[dict]:
    """System | file context (if any) | unit + the finding to explain."""
    messages = [{"role": "system", "content": EXPLAIN_SYSTEM_PROMPT}]
    if context.strip():
        messages.append(_context_message(path, context))
    messages.append({"role": "user", "content": defuse(
        _unit_text(path, unit, code, None) + "\nExplain this finding:\n" + json.dumps(finding, indent=1)
    )})
    return messages


@dataclass
class Rendered:
    """A prompt as token ids plus the offsets where its prefix is worth a prompt cache."""

    tokens: list[int]
    segments: list[int]  # ascending: end of system+tools, end of file context (when present)


def render(tokenizer, messages: list[dict], tools: list[dict]) -> Rendered:
    """Render `messages` with `tools` through the chat template, ready for generation.

    Segments are the message boundaries inside the opening run of system/user messages, before its
    last message (the unit): the end of system+tools and the end of the file context. A continued
    conversation keeps the same segments; the engine caches the end of each generation itself.
    """
    tokens = template(tokenizer, messages, tools, add_generation_prompt=True)
    opening = next((i for i, m in enumerate(messages) if m["role"] not in ("system", "user")), len(messages))
    segments = []
    for n in range(1, opening):
        prefix = template(tokenizer, messages[:n], tools, add_generation_prompt=False)
        if tokens[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render a conversation as an extension of its prefix")
        segments.append(len(prefix))
    return Rendered(tokens, segments)


def answer_tokens(tokenizer, messages: list[dict], tools: list[dict], content: str = "",
                  calls: list[dict] | None = None) -> list[int]:
    """The exact tokens the model generates for an assistant turn (content, then tool calls).

    Taken from the template itself, so a scripted answer forced through the engine is canonical and
    the conversation re-rendered after it extends prompt + answer token for token.
    """
    prompt = template(tokenizer, messages, tools, add_generation_prompt=True)
    turn = assistant_message(content, [ToolCall(c["name"], c["arguments"], i) for i, c in enumerate(calls or [], 1)])
    full = template(tokenizer, [*messages, turn], tools, add_generation_prompt=False)
    if full[: len(prompt)] != prompt:
        raise ValueError("the chat template does not render an assistant turn as an extension of the prompt")
    return full[len(prompt):]


def template(tokenizer, messages: list[dict], tools: list[dict], *, add_generation_prompt: bool) -> list[int]:
    """The token ids of ``messages`` through the model's own chat template (no tools: ``tools=None``)."""
    return list(tokenizer.apply_chat_template(messages, tools=tools or None,
                                              add_generation_prompt=add_generation_prompt))


# --- reading the answer ------------------------------------------------------------------------------------


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    index: int  # 1-based position in the turn; the call id the tool result refers to


@dataclass
class ToolCallError:
    index: int
    text: str  # the offending text, truncated
    error: str


@dataclass
class ParsedTurn:
    content: str  # the text outside tool-call sections
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ToolCallError] = field(default_factory=list)


_CALL_OPEN, _CALL_CLOSE = "<|open|>call", "<|close|>call<|sep|>"
END_OF_MESSAGE = ("<|close|>message<|sep|>", "<|end_of_msg|>")


def parse_turn(text: str) -> ParsedTurn:
    """Split generated text into prose and tool calls; every malformed call becomes a ToolCallError.

    Positions count every call block (and stray text) of the turn from 1, valid or not.
    """
    prose, sections, errors = _split_sections(text)
    calls: list[ToolCall] = []
    position = 0
    for section in sections:
        for block, problem in _call_blocks(section):
            position += 1
            parsed = problem or _parse_call(block)
            if isinstance(parsed, str):
                errors.append(ToolCallError(position, _clip(block), parsed))
            else:
                calls.append(ToolCall(parsed["name"], parsed["arguments"], position))
    return ParsedTurn(prose, calls, errors)


def _split_sections(text: str) -> tuple[str, list[str], list[ToolCallError]]:
    """(prose outside tool sections, the sections' insides, an error if the last one is not closed)."""
    start, end = kimi_k3.tool_call_start, kimi_k3.tool_call_end
    prose, sections, errors = [], [], []
    rest = text
    while start in rest:
        before, _, after = rest.partition(start)
        prose.append(before)
        if end not in after:
            errors.append(ToolCallError(0, _clip(after), "tool-call section is not closed"))
            rest = ""
            break
        section, _, rest = after.partition(end)
        sections.append(section)
    prose.append(rest)
    prose_text = "".join(prose)
    for marker in END_OF_MESSAGE:
        prose_text = prose_text.replace(marker, "")
    return prose_text, sections, errors


def _call_blocks(section: str) -> list[tuple[str, str | None]]:
    """The `<|open|>call ...<|close|>call<|sep|>` blocks of a section, and stray text as problems."""
    blocks: list[tuple[str, str | None]] = []
    rest = section
    while _CALL_OPEN in rest:
        junk, _, after = rest.partition(_CALL_OPEN)
        if junk.strip():
            blocks.append((junk, "text between tool calls"))
        if _CALL_CLOSE not in after:
            blocks.append((_CALL_OPEN + after, "tool call is not closed"))
            return blocks
        body, _, rest = after.partition(_CALL_CLOSE)
        blocks.append((_CALL_OPEN + body + _CALL_CLOSE, None))
    if rest.strip():
        blocks.append((rest, "text in the tool-call section is not a call"))
    return blocks


def _parse_call(block: str) -> dict | str:
    try:
        (call,) = kimi_k3.parse_tool_call(block)
    except (ValueError, TypeError, RecursionError):  # RecursionError: json.loads of absurdly deep nesting
        return 'not a valid Kimi K3 tool call (needs tool="name" and a JSON object or typed arguments)'
    if not isinstance(call.get("arguments"), dict):
        return "tool-call arguments are not an object"
    return call


def _clip(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[:n] + "..."


# --- continuing the conversation ---------------------------------------------------------------------------


def assistant_message(content: str, calls: list[ToolCall]) -> dict:
    """The assistant turn as the template re-renders it (the calls canonical, ids = call indices)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": str(c.index), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return message


def tool_message(call: ToolCall, result: str) -> dict:
    """A tool result for the model; workspace text is data, so its markup tags are defused."""
    return {"role": "tool", "tool_call_id": str(call.index), "name": call.name, "content": defuse(result)}
