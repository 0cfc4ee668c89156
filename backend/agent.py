"""The audit loop of one request: generate -> tool calls -> results -> continue, within budgets.

The model reports each finding by calling ``report_finding``; a finding is validated and sent to the client
the moment its call closes in the generated text, not when the turn ends, so the editor shows it while the
model keeps going. When a turn ends with read-only workspace calls (``read_lines``, ``find_definition``,
``grep``), the client runs them (it owns the workspace and its sandbox) and the conversation goes on: the
assistant turn and the tool results are appended and the conversation is re-rendered through the chat
template. That re-rendering extends prompt + generation token for token, so the engine's prompt cache turns
it into a continuation that only prefills the tool results.

The loop ends when the model ends a turn without read-only calls (``stop``), or on a budget: tool rounds
(``budget``), generated tokens (``length``), wall time (``deadline``), or the loop guard (``loop``). Invalid
tool-call text is counted and reported in the stats; it never fails the request.

The agent knows nothing about sockets: the daemon gives it ``send`` (a message to the client) and
``ask_tool`` (a tool round trip to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from backend import engine, prompts
from backend.engine import GenRequest
from backend.scheduler import Scheduler
from backend.script import Script
from k3lsp import protocol
from k3lsp.bounds import FindingBounds

log = logging.getLogger(__name__)

READ_ONLY_TOOLS = frozenset({"read_lines", "find_definition", "grep"})
MAX_TOOL_RESULT_CHARS = 32 * 1024  # what one tool result may add to the conversation

Send = Callable[..., Awaitable[None]]  # send(kind, **fields)
AskTool = Callable[[str, dict], Awaitable[tuple[bool, str]]]  # ask_tool(tool, args) -> (ok, result)


class AgentError(Exception):
    """The request cannot go on; ``code`` is the protocol error code the client receives."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class AgentConfig:
    """Per-request limits and sampling, from the serve flags."""

    max_tokens: int = 1024  # generated tokens over all rounds of one request
    max_tool_rounds: int = 4  # continuations after tool results
    deadline: float = 600.0  # seconds for a whole request
    temp: float = 1.0
    top_p: float = 0.95


@dataclass
class Stats:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    tool_calls: int = 0
    findings: int = 0
    invalid_tool_calls: int = 0
    dropped_findings: int = 0
    findings_over_limit: int = 0  # valid findings beyond k3lsp.bounds (per unit, per finding, per result)
    rounds: int = 0
    batch_size_peak: int = 0
    finish_reason: str = "stop"
    turns: list[dict] = field(default_factory=list)  # per generation: what was prefilled, cached, generated

    def add_generation(self, stats: dict, finish: str) -> None:
        self.turns.append({k: int(stats.get(k, 0)) for k in ("prompt_tokens", "cached_tokens", "generated_tokens")}
                          | {"finish": finish})
        self.prompt_tokens += int(stats.get("prompt_tokens", 0))
        self.cached_tokens += int(stats.get("cached_tokens", 0))
        self.generated_tokens += int(stats.get("generated_tokens", 0))
        self.batch_size_peak = max(self.batch_size_peak, int(stats.get("batch_size_peak", 0)))
        self.rounds += 1


@dataclass
class Generation:
    text: str
    finish: str
    stats: dict


@dataclass
class Agent:
    """Everything one request needs from the daemon, bundled so the daemon creates it once per job."""

    scheduler: Scheduler
    config: AgentConfig
    send: Send
    ask_tool: AskTool
    script: Script = field(default_factory=Script)
    priority: int = 0
    last_rid: int | None = None  # the engine request of the latest generation

    @property
    def tokenizer(self):
        return self.scheduler.engine.tokenizer

    async def audit(self, req: dict) -> dict:
        """Run the audit loop for one ``audit`` message; returns the ``done`` stats."""
        messages = prompts.audit_messages(path=req["path"], unit=req["unit"], code=req["code"],
                                          context=req["context"], first_line=req.get("first_line"))
        budget = min(req.get("max_tokens", self.config.max_tokens), self.config.max_tokens)
        return await self._run(messages, prompts.AUDIT_TOOLS, req["unit"], budget, prose=False,
                               lines=len(req["code"].splitlines()) or 1)

    async def explain(self, req: dict) -> dict:
        """Stream an explanation of one finding as ``text`` messages; returns the ``done`` stats."""
        messages = prompts.explain_messages(path=req["path"], unit=req["unit"], code=req["code"],
                                            finding=req["finding"], context=req["context"])
        return await self._run(messages, prompts.EXPLAIN_TOOLS, req["unit"], self.config.max_tokens,
                               prose=True, lines=len(req["code"].splitlines()) or 1)

    async def _run(self, messages: list[dict], tools: list[dict], unit: str, budget: int,
                   prose: bool, lines: int) -> dict:
        started = time.monotonic()
        stats = Stats()
        try:
            async with asyncio.timeout(self.config.deadline):
                stats.finish_reason = await self._rounds(messages, tools, unit, budget, stats, prose, lines)
        except TimeoutError:
            stats.finish_reason = "deadline"
        finally:  # no round continues this conversation: its last generation's cache is worth nothing now
            if self.last_rid is not None:
                self.scheduler.release(self.last_rid)
        out = vars(stats) | {"seconds": round(time.monotonic() - started, 4)}
        return out

    async def _rounds(self, messages: list[dict], tools: list[dict], unit: str, budget: int, stats: Stats,
                      prose: bool, lines: int) -> str:
        allowed = {t["function"]["name"] for t in tools}
        bounds = FindingBounds()  # one unit's findings over all rounds
        for n in range(self.config.max_tool_rounds + 1):
            rendered = await asyncio.to_thread(_render, self.tokenizer, messages, tools)
            findings = FindingStream(self.send, stats, "report_finding" in allowed, lines, bounds)
            await self.send("progress", stage="queued", tokens=stats.generated_tokens, detail=f"round {n + 1}")
            on_text = ProseStream(self.send) if prose else None  # each generation's text starts empty
            gen = await self._generate(rendered, unit, n, budget - stats.generated_tokens, findings, on_text)
            stats.add_generation(gen.stats, gen.finish)
            turn = prompts.parse_turn(gen.text)
            await findings.sweep(turn)
            unknown = [c.name for c in turn.calls if c.name not in allowed]
            stats.invalid_tool_calls += len(turn.errors) + len(unknown)
            for error in turn.errors:
                log.info("invalid tool call text (%s): %s", error.error, error.text)
            if unknown:
                log.info("model called tools it does not have: %s", ", ".join(unknown))
            if gen.finish != "stop":
                return gen.finish
            if not any(c.name in READ_ONLY_TOOLS & allowed for c in turn.calls):
                return "stop"
            if n == self.config.max_tool_rounds:  # no round left to read the results in
                break
            results = [await self._tool_result(call, allowed, stats) for call in turn.calls]
            messages.append(prompts.assistant_message(turn.content, turn.calls))
            messages.extend(prompts.tool_message(c, r) for c, r in zip(turn.calls, results, strict=True))
        return "budget"

    async def _generate(self, rendered: prompts.Rendered, unit: str, n: int, budget: int,
                        findings: FindingStream, on_text: ProseStream | None) -> Generation:
        if budget <= 0:
            return Generation("", "length", {})
        rid = self.scheduler.new_rid()
        req = GenRequest(rid=rid, prompt=rendered.tokens, segments=rendered.segments, max_tokens=budget,
                         temp=self.config.temp, top_p=self.config.top_p, seed=rid, priority=self.priority,
                         forced=self.script.forced(self.tokenizer, unit, n), fault=self.script.fault(unit, n))
        text = ""
        self.last_rid = rid
        # aclosing: leaving early (cancelled, an error) cancels the generation in the engine now, not at GC
        async with contextlib.aclosing(self.scheduler.stream(req)) as events:
            async for event in events:
                if event.progress is not None:
                    stage, done, total = event.progress
                    await self.send("progress", stage=stage, tokens=done, total=total, detail=f"round {n + 1}")
                if event.text:
                    text += event.text
                    await findings.feed(text, len(event.text))
                    if on_text is not None:
                        await on_text.feed(event.text)
                if event.finish is not None:
                    if event.finish == "error":
                        code = (event.stats or {}).get("code") or engine.FAILED
                        if code == engine.TOO_LONG and n > 0:  # the conversation outgrew the context
                            return Generation(text, "length", event.stats or {})
                        why = (event.stats or {}).get("error", "engine error")
                        raise AgentError(code, f"generation failed: {why}" if code != engine.TOO_LONG else why)
                    if event.finish == "cancelled":
                        raise AgentError("shutdown", "the daemon cancelled the generation")
                    if on_text is not None:
                        await on_text.finish()
                    return Generation(text, event.finish, event.stats or {})
        raise AgentError("internal", "the generation ended without a finish event")

    async def _tool_result(self, call: prompts.ToolCall, allowed: set[str], stats: Stats) -> str:
        """The text the model gets back for one call of its turn."""
        if call.name == "report_finding" and call.name in allowed:
            return "recorded"
        if call.name not in READ_ONLY_TOOLS or call.name not in allowed:  # counted as invalid when parsed
            return f"error: there is no tool named {call.name!r}"
        stats.tool_calls += 1
        await self.send("progress", stage="tool", tokens=stats.generated_tokens, detail=call.name)
        ok, result = await self.ask_tool(call.name, call.arguments)
        result = result[:MAX_TOOL_RESULT_CHARS]
        return result if ok else f"error: {result}"


def _render(tokenizer, messages: list[dict], tools: list[dict]) -> prompts.Rendered:
    """Render off the event loop (the whole conversation is templated and tokenized each round), one
    render at a time: the tokenizer is shared by every request."""
    with _RENDER_LOCK:
        return prompts.render(tokenizer, messages, tools)


_RENDER_LOCK = threading.Lock()


class FindingStream:
    """Sends each ``report_finding`` call as a ``finding`` as soon as the call closes in the text.

    The model's arguments are untrusted: a call that fails the protocol's finding schema, or points past
    the ``lines`` of the audited unit, is dropped with a log line (the editor checks again on its side), and
    so is every finding beyond ``bounds`` (counted as ``findings_over_limit``); once they are full, calls
    are no longer parsed as they close, only counted when the turn ends.
    """

    _CLOSE = "<|close|>call<|sep|>"

    def __init__(self, send: Send, stats: Stats, enabled: bool, lines: int, bounds: FindingBounds):
        self._send = send
        self._stats = stats
        self._enabled = enabled
        self._lines = lines
        self._bounds = bounds
        self._seen: set[int] = set()

    async def feed(self, text: str, new_chars: int) -> None:
        """Called with the whole text after every new piece; parses only when a call just closed."""
        tail = text[-(new_chars + len(self._CLOSE)):]
        if not self._enabled or self._bounds.full or self._CLOSE not in tail:
            return
        cut = text.rfind(self._CLOSE) + len(self._CLOSE)
        prefix = text[:cut]
        start, end = prompts.kimi_k3.tool_call_start, prompts.kimi_k3.tool_call_end
        if prefix.count(start) > prefix.count(end):  # the section is still open: close it to parse its calls
            prefix += end
        await self.sweep(prompts.parse_turn(prefix))

    async def sweep(self, turn: prompts.ParsedTurn) -> None:
        """Send the report_finding calls of ``turn`` not sent yet (calls are identified by their index)."""
        if not self._enabled:
            return
        for call in turn.calls:
            if call.name != "report_finding" or call.index in self._seen:
                continue
            self._seen.add(call.index)
            try:
                finding = protocol.validate_finding(call.arguments)
                self._check_lines(finding)
            except protocol.ProtocolError as exc:
                self._stats.dropped_findings += 1
                log.info("dropped invalid finding from report_finding call %d: %s", call.index, exc)
                continue
            why = self._bounds.admit(finding)
            if why is not None:
                self._stats.findings_over_limit += 1
                if self._bounds.dropped == 1:
                    log.warning("dropping findings beyond the bounds of one unit: %s", why)
                continue
            self._stats.findings += 1
            await self._send("finding", finding=finding)


    def _check_lines(self, finding: dict) -> None:
        """Every line a finding names (its range, trace steps, fix range) must be a line of the unit."""
        lines = [("", finding["end_line"])] + [(f"trace[{i}].", step["line"])
                                               for i, step in enumerate(finding["trace"])]
        if "fix" in finding:
            lines.append(("fix.", finding["fix"]["end_line"]))
        for where, line in lines:  # start lines are >= 1 and <= their end lines (the schema checked that)
            if line > self._lines:
                raise protocol.ProtocolError(f"{where}line {line} is outside the unit's {self._lines} lines")


class ProseStream:
    """Streams the prose of one generation as ``text`` messages, leaving out tool-call sections and markup.

    It is fed only each event's new text and keeps what is undecided: inside a tool-call section, text up
    to the section's end is dropped; outside, a tail that could begin a marker (tags arrive token by token)
    is held back until the next piece, or the end of the generation, decides.
    """

    def __init__(self, send: Send):
        self._send = send
        self._pending = ""
        self._in_section = False

    async def feed(self, piece: str) -> None:
        self._pending += piece
        visible = []
        while True:
            marker = _SECTION_END if self._in_section else _SECTION_START
            cut = self._pending.find(marker)
            if cut < 0:
                break
            if not self._in_section:
                visible.append(self._pending[:cut])
            self._pending = self._pending[cut + len(marker):]
            self._in_section = not self._in_section
        if self._in_section:  # only a possible start of the end marker matters
            self._pending = self._pending[-(len(_SECTION_END) - 1):]
        else:
            held = _partial_marker(self._pending)
            visible.append(self._pending[:len(self._pending) - held])
            self._pending = self._pending[len(self._pending) - held:]
        await self._emit("".join(visible))

    async def finish(self) -> None:
        """The generation ended: a held-back tail was prose after all (an unclosed section is not)."""
        if not self._in_section:
            await self._emit(self._pending)
        self._pending = ""

    async def _emit(self, text: str) -> None:
        for marker in prompts.END_OF_MESSAGE:
            text = text.replace(marker, "")
        if text:
            await self._send("text", text=text)


_SECTION_START, _SECTION_END = prompts.kimi_k3.tool_call_start, prompts.kimi_k3.tool_call_end
_MARKERS = (_SECTION_START, *prompts.END_OF_MESSAGE)


def _partial_marker(text: str) -> int:
    """The length of the longest tail of ``text`` that is a proper start of a marker (0 if none)."""
    return max((k for marker in _MARKERS for k in range(len(marker) - 1, 0, -1) if text.endswith(marker[:k])),
               default=0)
