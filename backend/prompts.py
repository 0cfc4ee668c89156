"""What the model is told, and how its answers are read back.

Prompts go through the model's own renderer only (`tokenizer.apply_chat_template` with the tool schemas
and the thinking effort): that is the structure the pruned model was calibrated on, whether the renderer
is a Jinja template or the release's Python tokenizer class. The audited code and its file context are
data in user turns, never in the system prompt, and every special-token string of the vocabulary inside
them (or inside a tool result) is broken up, so data never becomes a special-token id: a source file cannot
close a message, open a channel or forge a tool call.

A prompt is rendered as system (+ tools) | file context | unit, each its own message, so the token
offsets between them are exact message boundaries: the engine stores prompt caches there, and every
unit of one file reuses the system and context prefill.

A tool loop continues by appending, never by re-rendering: the next prompt is the previous prompt, the
tokens the model generated (its stop token included), then the new tool messages and a generation prompt
as the renderer renders them after the assistant turn (`continuation`). What the model sees is then
exactly what it wrote, whatever the renderer does with reasoning in history, and the engine's prompt
cache of prompt + generation covers all of it.

The model reports findings and asks for code by tool calls in the Kimi K3 format, read with mlx-lm's
`kimi_k3` tool parser from the tool-call sections `backend.channels` separates from the reasoning and the
response. Reading never raises: text that is not a valid call becomes a `ToolCallError`.
"""

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from mlx_lm.tool_parsers import kimi_k3

from backend import channels
from k3lsp.wire.protocol import EFFORTS

PROMPT_VERSION = "k3lsp-audit-7"  # 6: analyzer alerts to triage (triage_alert), the refutation turn (verdict), units
# under review (changed lines marked, the function before the change); 7: a unit under review shows the diff of
# the change rather than the whole function before it
DIFF_CONTEXT = 2  # unchanged lines around each hunk of a reviewed unit's diff

SYSTEM_PROMPT = (
    "You are a security auditor for C code. Find memory-safety, integer, concurrency, input-validation "
    "and privilege bugs in the unit the user gives you. Report every real vulnerability by calling "
    "report_finding once per bug, with line numbers counted from 1 at the first line of the unit. "
    "If you need code that is not shown, call read_lines, find_definition, find_references (the callers) or "
    "grep; give them a path to search less. Each answer says what it covered. Do not report style "
    "issues. Do not write an essay: when every finding is reported, end your turn."
)

EXPLAIN_SYSTEM_PROMPT = (
    "You are a security auditor for C code. Explain the given finding to the developer in at most five "
    "short sentences: the faulty data flow, how it can be triggered, and how to fix it. You may call "
    "read_lines or find_definition if you need more code."
)

# A rule in the rule prompt's example: a use after kfree. spatch parses it (tests/backend/test_rule_request.py), so
# the one rule the model is shown is a valid one; it is not a pattern the tests plant, so it cannot answer them.
RULE_EXAMPLE = "@@\nexpression E, F;\nidentifier fld;\n@@\n* kfree(E);\n  ... when != E = F\n* E->fld\n"

# spatch matches an assignment and a declaration apart (tested): a pattern that starts with either needs both forms.
RULE_FORMS = "(\n* x = f(...);\n|\n* T *x = f(...);\n)\n"

RULE_SYSTEM_PROMPT = (
    "You are a security auditor for C code who writes Coccinelle semantic patches. Given a finding in a unit of C "
    "code, write the smallest semantic patch (.cocci) that matches the finding's pattern, so that spatch finds the "
    "same bug elsewhere in the tree. The rules:\n"
    "- One rule block: one @@ header that declares the metavariables (e.g. @@ expression E; identifier f; @@), then "
    "the code to match. No second rule, no rule that depends on another.\n"
    "- Match the pattern, not this one function: a metavariable for each name, expression, type or constant that may "
    "differ elsewhere; ... for the code between the steps of the pattern; when != X for what must not come between "
    "them.\n"
    "- Mark the lines that show the bug with * in the first column, or write the fix as - and + lines; not both.\n"
    "- x = f(...); does not match T *x = f(...); nor the other way round: where the pattern starts with one, write "
    "both as a disjunction, with identifier x and type T:\n"
    + RULE_FORMS
    + "- It must match the finding's own lines in the unit shown.\n"
    "- No comments, and none of these anywhere in the rule: # (no #include), script, initialize, finalize, "
    "python, ocaml, using or virtual. A rule runs without them (no @script, @initialize or @finalize blocks), and "
    "one that has any is refused.\n"
    "Answer with the rule alone in one ```cocci fence. For example, a use after kfree:\n```cocci\n"
    + RULE_EXAMPLE
    + "```"
)

_LINE = {"type": "integer", "minimum": 1}


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


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
        "introduced": {
            "type": "boolean",
            "description": "for a unit under review (lines marked +): true when the change introduced this bug",
        },
        "trace": {
            "type": "array",
            "maxItems": 64,
            "description": "the data flow, source to sink",
            "items": {
                "type": "object",
                "properties": {"line": _LINE, "note": {"type": "string"}},
                "required": ["line", "note"],
            },
        },
        "fix": {
            "type": "object",
            "description": "replacement text for a line range of the unit",
            "properties": {"start_line": _LINE, "end_line": _LINE, "replacement": {"type": "string"}},
            "required": ["start_line", "end_line", "replacement"],
        },
    },
    ["cwe", "severity", "title", "message", "start_line", "end_line", "trace"],
)
READ_LINES = _tool(
    "read_lines",
    "Read lines start..end (1-based, inclusive) of a workspace file.",
    {"path": {"type": "string"}, "start": _LINE, "end": _LINE},
    ["path", "start", "end"],
)
_UNDER = {"type": "string", "description": "only under this workspace folder or file"}
FIND_DEFINITION = _tool(
    "find_definition",
    "Find where a function, macro, type or global is defined in the workspace, with its code.",
    {"symbol": {"type": "string"}, "path": _UNDER},
    ["symbol"],
)
FIND_REFERENCES = _tool(
    "find_references",
    "Find the lines that use a function, macro, type or global, each with the function it is in (the callers).",
    {"symbol": {"type": "string"}, "path": _UNDER},
    ["symbol"],
)
GREP = _tool(
    "grep",
    "Search the workspace for a regular expression.",
    {"pattern": {"type": "string"}, "path": _UNDER},
    ["pattern"],
)
_REASON = {"type": "string", "maxLength": 2000, "description": "the evidence, with the lines it rests on"}
TRIAGE_ALERT = _tool(
    "triage_alert",
    "Give your verdict on one static-analyzer alert listed with the unit: confirmed if the bug is real, refuted if "
    "the analyzer is wrong here.",
    {
        "id": {"type": "string", "description": "the alert's id, e.g. A1"},
        "verdict": {"type": "string", "enum": ["confirmed", "refuted"]},
        "reason": _REASON,
        "cwe": {"type": "integer", "minimum": 1, "description": "the CWE, when the alert has none or the wrong one"},
    },
    ["id", "verdict", "reason"],
)
VERDICT = _tool(
    "verdict",
    "Give your verdict on one of your findings after trying to disprove it.",
    {
        "finding": {"type": "integer", "minimum": 1, "description": "the finding's number, e.g. 1 for F1"},
        "verdict": {"type": "string", "enum": ["confirmed", "refuted", "uncertain"]},
        "reason": _REASON,
    },
    ["finding", "verdict", "reason"],
)

# One list for every audit turn (the refutation turn too), so every audit shares the system prompt's cache.
AUDIT_TOOLS = [REPORT_FINDING, TRIAGE_ALERT, VERDICT, READ_LINES, FIND_DEFINITION, FIND_REFERENCES, GREP]
VERDICT_TOOLS = ("triage_alert", "verdict")  # calls that record a verdict: answered "recorded", like report_finding
EXPLAIN_TOOLS = [READ_LINES, FIND_DEFINITION]
RULE_TOOLS = EXPLAIN_TOOLS  # a macro or a wrapper's definition, to match through it

JOINER = "\u2060"  # word joiner: invisible, and no special token contains it


def special_strings(tokenizer) -> tuple[str, ...]:
    """Every added or special token of the vocabulary, as text, longest first: what data must never spell."""
    added = {t.content for t in tokenizer.added_tokens_decoder.values()} | set(tokenizer.all_special_tokens)
    return tuple(sorted((t for t in added if len(t) > 1), key=lambda t: (-len(t), t)))


def defuse(text: str, specials: tuple[str, ...]) -> str:
    """Data as the model may see it: no special-token string survives whole (a joiner follows its first
    character), so it tokenizes as ordinary text, never as the special id. Inserting a joiner cannot create
    another special string, so one pass over the strings suffices."""
    for token in specials:
        if token in text:
            text = text.replace(token, token[0] + JOINER + token[1:])
    return text


def numbered(code: str, changed: frozenset[int] = frozenset()) -> str:
    """The unit with 1-based line numbers, the numbering findings use: ``12|`` and the line as it is. No
    padding and no space after the bar: on zlib's gzread.c that costs 1.12 tokens per unit token instead of
    1.17 (bench/prefill_efficiency.py), and indentation stays the code's own. A line in ``changed`` (the change
    under review added or modified it) is marked in the gutter: ``12+|``."""
    lines = code.splitlines() or [""]
    return "\n".join(f"{i}{'+' if i in changed else ''}|{line}" for i, line in enumerate(lines, 1))


def _context_message(path: str, context: str, specials: tuple[str, ...]) -> dict:
    return {
        "role": "user",
        "content": defuse(
            f"File: {path}\nDeclarations this file's units use (context only, do not audit):\n```c\n{context}\n```",
            specials,
        ),
    }


def _unit_text(path: str, unit: str, code: str, first_line: int | None) -> str:
    where = f" (line {first_line} of the file)" if first_line else ""
    return f"Unit `{unit}` from {path}{where}, numbered from 1:\n```c\n{numbered(code)}\n```"


def alerts_text(alerts: list[dict]) -> str:
    """The analyzer alerts of a unit as claims for the model to check (lines relative to the unit, like its own)."""
    if not alerts:
        return ""
    rows = [
        f"{a['id']}: line {a['line']}, {a['tool']} {a['rule']}"
        + (f" (CWE-{a['cwe']})" if a.get("cwe") else "")
        + f": {a['message']}"
        for a in alerts
    ]
    return (
        "\nStatic analyzers reported these alerts in this unit. They are claims, often false: check each one "
        "against the code and call triage_alert with its id, confirmed or refuted, and why.\n" + "\n".join(rows)
    )


def _review_text(path: str, unit: str, code: str, first_line: int | None, changes: dict) -> str:
    """A unit under review: what the change did to it, then the unit after it with the changed lines marked (the
    question follows, in ``audit_messages``). What it did is the diff of the function, as a reviewer reads a patch:
    its hunks with ``DIFF_CONTEXT`` lines around them. The unit after the change is shown in full below it, so the
    diff only has to carry the removed lines; for a function rewritten almost whole, the diff would be longer than
    the function was, and the function before the change is shown instead."""
    where = f" (line {first_line} of the file)" if first_line else ""
    preimage = changes["preimage"]
    if not preimage.strip():
        before = f"The change under review adds `{unit}`."
    else:
        diff = list(difflib.unified_diff(preimage.split("\n"), code.split("\n"), n=DIFF_CONTEXT, lineterm=""))[2:]
        if len(diff) < preimage.count("\n") + 1:
            before = f"The change under review, as a diff of `{unit}`:\n```diff\n" + "\n".join(diff) + "\n```"
        else:
            before = f"Before the change under review, `{unit}` read:\n```c\n{preimage}\n```"
    marked = numbered(code, frozenset(changes["lines"]))
    return (
        f"{before}\nUnit `{unit}` from {path}{where} after the change, numbered from 1; the lines the change added "
        f"or modified are marked + (`12+|`):\n```c\n{marked}\n```"
    )


def audit_messages(
    *,
    path: str,
    unit: str,
    code: str,
    specials: tuple[str, ...],
    context: str = "",
    first_line: int | None = None,
    alerts: list[dict] | None = None,
    changes: dict | None = None,
) -> list[dict]:
    """System | file context (if any) | unit (and its analyzer alerts): the conversation that starts the audit of
    one unit. A unit under review (``changes``, the ``audit`` field) is shown with its changed lines marked, after
    the function as it was before the change, in the same message: one prompt-cache segment less than a message
    of its own."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    if context.strip():
        messages.append(_context_message(path, context, specials))
    if changes is not None:
        text = _review_text(path, unit, code, first_line, changes)
        ask = "\nAudit this unit and report each vulnerability; set introduced to true for one the change introduced."
    else:
        text, ask = _unit_text(path, unit, code, first_line), "\nAudit this unit and report each vulnerability."
    messages.append({"role": "user", "content": defuse(text + alerts_text(alerts or []) + ask, specials)})
    return messages


def refutation_message(findings: list[tuple[int, dict]], specials: tuple[str, ...]) -> dict:
    """The refutation turn: the findings (numbered as reported, from 1) that the model must now try to disprove."""
    rows = [
        f"F{n}: lines {f['start_line']}-{f['end_line']}, CWE-{f['cwe']}, {f['severity']}: {f['title']}"
        for n, f in findings
    ]
    text = (
        "Now try to disprove each of these findings: look for the check, the caller or the invariant that makes it "
        "impossible (read more code if you need to). Then call verdict once per finding: refuted if you found "
        "what prevents it, confirmed if it holds, uncertain otherwise.\n" + "\n".join(rows)
    )
    return {"role": "user", "content": defuse(text, specials)}


def explain_messages(
    *, path: str, unit: str, code: str, finding: dict, specials: tuple[str, ...], context: str = ""
) -> list[dict]:
    """System | file context (if any) | unit + the finding to explain."""
    messages = [{"role": "system", "content": EXPLAIN_SYSTEM_PROMPT}]
    if context.strip():
        messages.append(_context_message(path, context, specials))
    messages.append(
        {
            "role": "user",
            "content": defuse(
                _unit_text(path, unit, code, None) + "\nExplain this finding:\n" + json.dumps(finding, indent=1),
                specials,
            ),
        }
    )
    return messages


def rule_messages(
    *,
    path: str,
    unit: str,
    code: str,
    finding: dict,
    specials: tuple[str, ...],
    context: str = "",
    tries: list[dict] | None = None,
) -> list[dict]:
    """System (the rules for a rule) | file context (if any) | unit + the finding + the earlier tries, if any: each
    rule the model wrote before and what spatch said of it, oldest first, so the next one avoids the same fault.
    The tries are data in the user turn like the code (the model's own words, but sent back by the editor)."""
    messages = [{"role": "system", "content": RULE_SYSTEM_PROMPT}]
    if context.strip():
        messages.append(_context_message(path, context, specials))
    lines = f"line {finding['start_line']}" + (
        f"-{finding['end_line']}" if finding["end_line"] != finding["start_line"] else ""
    )
    text = (
        _unit_text(path, unit, code, None)
        + f"\nThe finding, at {lines} of the unit:\n"
        + json.dumps(finding, indent=1)
        + "".join(
            f"\nYour rule {n} did not work:\n```cocci\n{t['rule'].rstrip()}\n```\nspatch: {t['outcome']}"
            for n, t in enumerate(tries or [], 1)
        )
        + ("\nWrite a rule that does not fail as those did." if tries else "\nWrite the rule.")
    )
    messages.append({"role": "user", "content": defuse(text, specials)})
    return messages


@dataclass
class Rendered:
    """A prompt as token ids plus the offsets where its prefix is worth a prompt cache."""

    tokens: list[int]
    segments: list[int]  # ascending: end of system+tools, end of file context (when present)


def render(tokenizer, messages: list[dict], tools: list[dict], effort: str) -> Rendered:
    """Render `messages` with `tools` through the model's renderer, ready for generation at `effort`.

    Segments are the message boundaries inside the opening run of system/user messages, before its
    last message (the unit): the end of system+tools and the end of the file context. A continued
    conversation keeps the same segments; the engine caches the end of each generation itself.
    """
    tokens = template(tokenizer, messages, tools, add_generation_prompt=True, effort=effort)
    segments = []
    for n in range(1, len(messages)):
        prefix = template(tokenizer, messages[:n], tools, add_generation_prompt=False, effort=effort)
        if tokens[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render a conversation as an extension of its prefix")
        segments.append(len(prefix))
    return Rendered(tokens, segments)


class ContinuationError(ValueError):
    """The renderer does not render the tool messages as an extension of the conversation before them."""


def continuation(
    tokenizer, history: list[dict], assistant: dict, results: list[dict], tools: list[dict], effort: str
) -> list[int]:
    """The tokens that follow an assistant turn: its tool result messages and the next generation prompt.

    Taken from the renderer as the difference of two renders, the conversation up to the assistant turn and
    the same plus the results, so that the renderer alone decides how a tool message looks. How the
    assistant turn itself renders does not matter: the caller puts the generated tokens in its place.
    """
    before = template(tokenizer, [*history, assistant], tools, add_generation_prompt=False, effort=effort)
    after = template(tokenizer, [*history, assistant, *results], tools, add_generation_prompt=True, effort=effort)
    if after[: len(before)] != before:
        raise ContinuationError("the renderer does not render tool results as an extension of the conversation")
    return after[len(before) :]


def template(
    tokenizer, messages: list[dict], tools: list[dict], *, add_generation_prompt: bool, effort: str
) -> list[int]:
    """The token ids of ``messages`` through the model's own renderer (no tools: ``tools=None``).

    ``effort`` off turns thinking off; otherwise it goes to the renderer as ``thinking_effort`` (mlx-lm's
    TokenizerWrapper passes ``enable_thinking`` as ``thinking`` to a renderer that names it so).
    """
    if effort not in EFFORTS:
        raise ValueError(f"thinking effort must be one of {', '.join(EFFORTS)}, got {effort!r}")
    thinking = {"enable_thinking": effort != "off"} | ({"thinking_effort": effort} if effort != "off" else {})
    return list(
        tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, **thinking
        )
    )


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
    content: str  # the response: text outside the think channel and the tool-call sections, markers stripped
    reasoning: str = ""  # the think channel
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ToolCallError] = field(default_factory=list)
    think_calls: int = 0  # call blocks written inside the think channel: never run


_CALL_OPEN, CALL_CLOSE = "<|open|>call", "<|close|>call<|sep|>"


def read_turn(reader: channels.Reader) -> ParsedTurn:
    """The turn a finished reader has read: its channels, and its calls parsed; an unclosed section is an
    error. Positions count every call block (and stray text) of the sections outside think from 1."""
    calls, errors = parse_calls(reader.sections)
    if reader.open_section:
        errors.append(ToolCallError(0, _clip(reader.section), "tool-call section is not closed"))
    think_calls = sum(max(1, s.count(CALL_CLOSE)) for s in reader.think_sections)
    return ParsedTurn(reader.content, reader.reasoning, calls, errors, think_calls)


def parse_turn(markers: channels.Markers, text: str, initial: str = channels.NORMAL) -> ParsedTurn:
    """Read a whole generated text (starting in channel ``initial``)."""
    reader = channels.Reader(markers, initial)
    reader.feed(text)
    reader.finish()
    return read_turn(reader)


def parse_calls(sections: list[str]) -> tuple[list[ToolCall], list[ToolCallError]]:
    """The calls of tool-call sections (their insides), every malformed block a ToolCallError."""
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    position = 0
    for section in sections:
        for block, problem in _call_blocks(section):
            position += 1
            parsed = problem or _parse_call(block)
            if isinstance(parsed, str):
                errors.append(ToolCallError(position, _clip(block), parsed))
            else:
                calls.append(ToolCall(parsed["name"], parsed["arguments"], position))
    return calls, errors


def closed_calls(section: str) -> str:
    """The part of an open section up to its last complete call (what can be parsed before it closes)."""
    cut = section.rfind(CALL_CLOSE)
    return section[: cut + len(CALL_CLOSE)] if cut >= 0 else ""


def _call_blocks(section: str) -> list[tuple[str, str | None]]:
    """The `<|open|>call ...<|close|>call<|sep|>` blocks of a section, and stray text as problems."""
    blocks: list[tuple[str, str | None]] = []
    rest = section
    while _CALL_OPEN in rest:
        junk, _, after = rest.partition(_CALL_OPEN)
        if junk.strip():
            blocks.append((junk, "text between tool calls"))
        if CALL_CLOSE not in after:
            blocks.append((_CALL_OPEN + after, "tool call is not closed"))
            return blocks
        body, _, rest = after.partition(CALL_CLOSE)
        blocks.append((_CALL_OPEN + body + CALL_CLOSE, None))
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


def assistant_message(content: str, calls: list[ToolCall], reasoning: str = "") -> dict:
    """The assistant turn as history keeps it: the response as ``content``, the think channel apart as
    ``reasoning_content`` (never inside the content), the calls canonical with ids = call indices."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": str(c.index), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return message


def tool_message(call: ToolCall, result: str, specials: tuple[str, ...]) -> dict:
    """A tool result for the model; workspace text is data, so its special-token strings are defused."""
    return {"role": "tool", "tool_call_id": str(call.index), "name": call.name, "content": defuse(result, specials)}
