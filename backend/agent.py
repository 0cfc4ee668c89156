"""The audit loop of one request: generate -> tool calls -> results -> continue, within budgets.

Each generation is read as it streams (``backend.channels``): the think channel (the reasoning), the response
and the tool-call sections are told apart by the markers mlx-lm infers for the tokenizer. The model reports
each finding by calling ``report_finding``; a finding is validated and sent to the client the moment its call
closes in a tool-call section, not when the turn ends, so the editor shows it while the model keeps going, and
it carries the reasoning the model wrote before it (bounded). Calls written inside the think channel are
never run, nor their findings reported. ``explain`` and ``rule`` (a Coccinelle rule for a finding, issue 43) stream
the response channel only.

When a turn ends with read-only workspace calls (``protocol.WORKSPACE_TOOLS``: ``read_lines``, ``grep``,
``find_definition``, ``find_references``), the client runs them (it owns the workspace and its sandbox) and
the conversation goes on by appending: the next prompt
is the previous prompt + the tokens the model generated (the end-of-message token it stopped on included) +
the tool results and a generation prompt as the renderer renders them (``prompts.continuation``). The engine
stored prompt + generation at the end of the generation (a continuation entry of its prompt cache, taken by
the next round and released when the conversation ends), so each round prefills only the new tool turn. The
history kept beside it has the reasoning as ``reasoning_content``, apart from the response in ``content``.

The thinking effort (the request's, or the daemon's default) goes to the renderer and chooses the token
budget. The loop ends when the model ends a turn without read-only calls (``stop``), or on a budget: tool
rounds (``budget``), generated tokens (``length``), wall time (``deadline``), or the loop guard (``loop``).
Invalid tool-call text is counted and reported in the stats; it never fails the request.

The agent knows nothing about sockets: the daemon gives it ``send`` (a message to the client) and
``ask_tool`` (a tool round trip to the client).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from backend import channels, prompts
from backend.engine import EngineArgs, Failed, Finish, GenRequest
from backend.hooks import About
from backend.scheduler import Scheduler
from backend.settings import flag
from k3lsp.wire import protocol
from k3lsp.wire.bounds import FindingBounds, fit_lines
from k3lsp.wire.protocol import CodedError, ErrorCode, Priority

log = logging.getLogger(__name__)

READ_ONLY_TOOLS = frozenset(protocol.WORKSPACE_TOOLS)
MAX_TOOL_RESULT_CHARS = 32 * 1024  # what one tool result may add to the conversation
PROGRESS_EVERY = 0.2  # seconds between two prefill or decode progress messages of one generation
# Generated tokens per request (all rounds) at each thinking effort: reasoning is most of a turn's tokens.
EFFORT_BUDGETS = {"off": 1024, "low": 2048, "high": 8192, "max": 32768}

Send = Callable[..., Awaitable[None]]  # send(kind, **fields)
AskTool = Callable[[str, dict], Awaitable[tuple[bool, str]]]  # ask_tool(tool, args) -> (ok, result)
Record = Callable[[dict], None]  # record(session): a finished conversation, for --trace-file
Admit = Callable[[], contextlib.AbstractAsyncContextManager]  # admit(): held while one generation runs


class AgentError(CodedError):
    """The request cannot go on; ``code`` is the error code the client receives."""


@dataclass
class AgentConfig:
    """Per-request limits, sampling and thinking, from the serve flags."""

    max_tokens: int | None = field(
        default=None,
        metadata=flag(  # when set, the budget at every effort
            "generated tokens per request, all tool rounds, at every thinking effort (default: the effort's own "
            "budget, see --effort-tokens)",
            type=int,
        ),
    )
    max_tool_rounds: int = field(default=4, metadata=flag("continuations after tool results"))
    deadline: float = field(default=600.0, metadata=flag("seconds per request"))
    temp: float = field(default=EngineArgs.temp, metadata=flag("sampling temperature (0: the likeliest token)"))
    top_p: float = field(
        default=EngineArgs.top_p, metadata=flag("sample among the likeliest tokens that together have this probability")
    )
    thinking_effort: str = field(
        default="low",
        metadata=flag(  # for requests that name none
            "how long the model thinks when a request does not say (default %(default)s)", choices=protocol.EFFORTS
        ),
    )
    refute_tokens: int = field(
        default=2048, metadata=flag("generated tokens the refutation turn may use, on top of the audit's budget")
    )
    budgets: dict[str, int] = field(default_factory=lambda: dict(EFFORT_BUDGETS))

    def budget(self, effort: str, requested: int | None = None) -> int:
        """Generated tokens a request at ``effort`` may use: the effort's budget (or --max-tokens, when given),
        capped by the request's own ``max_tokens``."""
        budget = self.budgets[effort] if self.max_tokens is None else self.max_tokens
        return budget if requested is None else min(budget, requested)


@dataclass
class ChannelTally:
    """Tokens generated per channel over the daemon's life, for ``status``."""

    reasoning_tokens: int = 0
    response_tokens: int = 0


@dataclass
class Stats:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    reasoning_tokens: int = 0  # in the think channel, its markers included
    response_tokens: int = 0  # everything else generated: the response, tool calls, the stop token
    tool_calls: int = 0
    findings: int = 0
    invalid_tool_calls: int = 0
    think_tool_calls: int = 0  # calls written inside the think channel (never run)
    dropped_findings: int = 0
    findings_over_limit: int = 0  # valid findings beyond k3lsp.wire.bounds (per unit, per finding, per result)
    rounds: int = 0
    batch_size_peak: int = 0
    thinking_effort: str = ""
    token_budget: int = 0
    finish_reason: str = "stop"
    confirmed: int = 0  # findings the refutation turn confirmed
    refuted: int = 0  # ... and refuted
    alerts_confirmed: int = 0  # analyzer alerts the model confirmed (triage_alert)
    alerts_refuted: int = 0
    refute_finish: str = ""  # how the refutation turn ended ("" when there was none)
    refute_tokens: int = 0  # tokens it generated (its own budget)
    turns: list[dict] = field(default_factory=list)  # per generation: what was prefilled, cached, generated

    def add_generation(self, stats: dict, finish: str, reasoning: int) -> None:
        turn = {k: int(stats.get(k, 0)) for k in ("prompt_tokens", "cached_tokens", "generated_tokens")}
        self.turns.append(turn | {"reasoning_tokens": reasoning, "finish": finish})
        self.prompt_tokens += turn["prompt_tokens"]
        self.cached_tokens += turn["cached_tokens"]
        self.generated_tokens += turn["generated_tokens"]
        self.reasoning_tokens += reasoning
        self.response_tokens += turn["generated_tokens"] - reasoning
        self.batch_size_peak = max(self.batch_size_peak, int(stats.get("batch_size_peak", 0)))
        self.rounds += 1


@dataclass
class Generation:
    finish: Finish
    stats: dict
    tokens: list[int]  # every generated id, the stop token included


@dataclass
class Conversation:
    """One request's conversation: the history as messages, and the prompt the next round generates from."""

    messages: list[dict]
    tools: list[dict]
    effort: str
    specials: tuple[str, ...]
    prompt: list[int] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)
    alerts: list[dict] = field(default_factory=list)  # the analyzer alerts the model is asked to triage
    refute_from: str | None = None  # the refutation turn's severity threshold; None: no refutation turn
    review: bool = False  # the unit is under review (the request's `changes`): findings may say `introduced`
    kind: str = "audit"  # the request's kind and, for a rule, its earlier tries: what its generations are about
    tries: int = 0


@dataclass
class _AuditState:
    """What one audit request has produced over all its rounds: the findings sent (numbered from 1 in this
    order), the ids that may get a verdict, and the last generation's tokens (what a new turn appends to)."""

    bounds: FindingBounds
    alerts: list[dict]
    sent: list[dict] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # the findings the refutation turn asked about
    judged: set[tuple[str, str]] = field(default_factory=set)
    last: list[int] = field(default_factory=list)

    def verdict_of(self, call: prompts.ToolCall) -> dict | None:
        """The ``verdict`` message fields for a triage_alert or verdict call; None when it is not valid."""
        args = call.arguments
        reason = args.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            return None
        if call.name == "triage_alert":
            on, ref, allowed = "alert", args.get("id"), ("confirmed", "refuted")
            known = {a["id"] for a in self.alerts}
        else:
            on, ref, allowed = "finding", args.get("finding"), protocol.VERDICTS
            ref = str(ref) if isinstance(ref, int) and not isinstance(ref, bool) else None
            known = self.listed
        if ref not in known or args.get("verdict") not in allowed or (on, ref) in self.judged:
            return None
        self.judged.add((on, ref))
        out = {"on": on, "ref": ref, "verdict": args["verdict"], "reason": reason.strip()[:2000]}
        cwe = args.get("cwe")
        if on == "alert" and isinstance(cwe, int) and not isinstance(cwe, bool) and 0 < cwe <= 100_000:
            out["cwe"] = cwe
        return out


@dataclass
class Agent:
    """Everything one request needs from the daemon, bundled so the daemon creates it once per job."""

    scheduler: Scheduler
    config: AgentConfig
    send: Send
    ask_tool: AskTool
    priority: Priority = Priority.INTERACTIVE
    owner: str = ""  # the requester's identity: the engine keeps its file contexts and continuations apart
    tally: ChannelTally = field(default_factory=ChannelTally)
    record: Record | None = None
    admit: Admit = contextlib.nullcontext  # the engine slot each generation waits for; tool rounds hold none
    last_rid: int | None = None  # the engine request of the latest generation

    @property
    def tokenizer(self):
        return self.scheduler.engine.tokenizer

    async def audit(self, req: dict) -> dict:
        """Run the audit loop for one ``audit`` message; returns the ``done`` stats."""
        effort = req.get("thinking_effort") or self.config.thinking_effort
        return await self._run(
            conversation(self.tokenizer, req, effort),
            req["unit"],
            self.config.budget(effort, req.get("max_tokens")),
            prose=False,
            lines=len(req["code"].splitlines()) or 1,
        )

    async def explain(self, req: dict) -> dict:
        """Stream an explanation of one finding (its response channel) as ``text``; returns the ``done`` stats."""
        effort = req.get("thinking_effort") or self.config.thinking_effort
        return await self._run(
            conversation(self.tokenizer, req, effort, "explain"),
            req["unit"],
            self.config.budget(effort),
            prose=True,
            lines=len(req["code"].splitlines()) or 1,
        )

    async def rule(self, req: dict) -> dict:
        """Stream a Coccinelle rule for one finding (the response channel: the fenced rule and whatever the model
        says around it, which the editor cuts away) as ``text``; returns the ``done`` stats."""
        effort = req.get("thinking_effort") or self.config.thinking_effort
        return await self._run(
            conversation(self.tokenizer, req, effort, "rule"),
            req["unit"],
            self.config.budget(effort, req.get("max_tokens")),
            prose=True,
            lines=len(req["code"].splitlines()) or 1,
        )

    async def _run(self, conv: Conversation, unit: str, budget: int, prose: bool, lines: int) -> dict:
        started = time.monotonic()
        stats = Stats(thinking_effort=conv.effort, token_budget=budget)
        try:
            async with asyncio.timeout(self.config.deadline):
                stats.finish_reason = await self._rounds(conv, unit, budget, stats, prose, lines)
        except TimeoutError:
            stats.finish_reason = "deadline"
        finally:  # no round continues this conversation: its last generation's cache is worth nothing now
            if self.last_rid is not None:
                self.scheduler.release(self.last_rid)
        if self.record is not None:
            self.record({"id": unit, "tools": conv.tools, "thinking_effort": conv.effort, "messages": conv.messages})
        return vars(stats) | {"seconds": round(time.monotonic() - started, 4)}

    async def _rounds(self, conv: Conversation, unit: str, budget: int, stats: Stats, prose: bool, lines: int) -> str:
        allowed = {t["function"]["name"] for t in conv.tools}
        rendered = await asyncio.to_thread(
            _locked, prompts.render, self.tokenizer, conv.messages, conv.tools, conv.effort
        )
        conv.prompt, conv.segments = rendered.tokens, rendered.segments
        state = _AuditState(FindingBounds(), conv.alerts)  # one unit's findings and verdicts over all rounds
        finish = await self._loop(conv, unit, budget, stats, prose, lines, allowed, state)
        if finish == "stop" and conv.refute_from is not None:
            await self._refute(conv, unit, stats, lines, allowed, state)
        return finish

    async def _refute(
        self, conv: Conversation, unit: str, stats: Stats, lines: int, allowed: set[str], state: _AuditState
    ) -> None:
        """The refutation turn: one more user turn appended to the same conversation (only it is prefilled: the
        prompt and generation before it are in the engine's continuation cache), asking the model to disprove
        each finding at or above ``refute_from``, within a token budget of its own. How it ended is
        ``refute_finish`` in the stats; it never makes the audit incomplete."""
        limit = protocol.SEVERITIES.index(conv.refute_from)
        listed = [(n, f) for n, f in enumerate(state.sent, 1) if protocol.SEVERITIES.index(f["severity"]) <= limit]
        if not listed:
            return
        state.listed = {str(n) for n, _ in listed}
        turn = prompts.refutation_message(listed, conv.specials)
        conv.prompt = await asyncio.to_thread(_locked, _continued, self.tokenizer, conv, state.last, [turn])
        conv.messages.append(turn)
        spent = stats.generated_tokens
        stats.refute_finish = await self._loop(
            conv, unit, self.config.refute_tokens, stats, False, lines, allowed, state, spent=spent
        )
        stats.refute_tokens = stats.generated_tokens - spent

    async def _loop(
        self,
        conv: Conversation,
        unit: str,
        budget: int,
        stats: Stats,
        prose: bool,
        lines: int,
        allowed: set[str],
        state: _AuditState,
        spent: int = 0,
    ) -> str:
        """Generations and tool rounds from ``conv.prompt`` until the model ends a turn without read-only calls;
        ``budget`` counts the tokens generated since ``spent``."""
        markers = channels.Markers.of(self.tokenizer)
        for n in range(self.config.max_tool_rounds + 1):
            generation = stats.rounds  # the request's n-th generation (About.generation: a script's n-th turn)
            initial = channels.initial_state(self.tokenizer, conv.prompt)
            reader = channels.Reader(markers, initial)
            findings = FindingStream(
                self.send, stats, "report_finding" in allowed, lines, state.bounds, state.sent, conv.review
            )
            await self.send("progress", stage="queued", tokens=stats.generated_tokens, detail=f"round {generation + 1}")
            async with self.admit():  # a fair turn in the engine (backend/fairshare.py), for this generation only
                left = budget - (stats.generated_tokens - spent)
                gen = await self._generate(conv, unit, generation, left, reader, findings, prose)
            reasoning = channels.reasoning_tokens(self.tokenizer, gen.tokens, initial)
            stats.add_generation(gen.stats, gen.finish, reasoning)
            self.tally.reasoning_tokens += reasoning
            self.tally.response_tokens += len(gen.tokens) - reasoning
            turn = prompts.read_turn(reader)
            await findings.sweep(turn.calls, turn.reasoning)
            await self._verdicts(turn.calls, state, stats)
            conv.messages.append(prompts.assistant_message(turn.content, turn.calls, turn.reasoning))
            state.last = gen.tokens
            self._count_invalid(turn, allowed, stats)
            if gen.finish != "stop":
                return gen.finish
            if not any(c.name in READ_ONLY_TOOLS & allowed for c in turn.calls):
                return "stop"
            if n == self.config.max_tool_rounds:  # no round left to read the results in
                break
            results = [await self._tool_result(call, allowed, stats) for call in turn.calls]
            tool_messages = [
                prompts.tool_message(c, r, conv.specials) for c, r in zip(turn.calls, results, strict=True)
            ]
            conv.prompt = await asyncio.to_thread(_locked, _continued, self.tokenizer, conv, gen.tokens, tool_messages)
            conv.messages.extend(tool_messages)
        return "budget"

    async def _verdicts(self, calls: list[prompts.ToolCall], state: _AuditState, stats: Stats) -> None:
        """Send the model's verdicts of one turn: ``triage_alert`` on an alert of the request, ``verdict`` (in the
        refutation turn) on a finding it lists; the first verdict on each wins, anything else is an invalid call."""
        for call in calls:
            if call.name not in prompts.VERDICT_TOOLS:
                continue
            verdict = state.verdict_of(call)
            if verdict is None:
                stats.invalid_tool_calls += 1
                log.info("ignored an invalid %s call: %.200r", call.name, call.arguments)
                continue
            key = {"confirmed": "confirmed", "refuted": "refuted"}.get(verdict["verdict"])
            if key is not None:
                name = key if verdict["on"] == "finding" else f"alerts_{key}"
                setattr(stats, name, getattr(stats, name) + 1)
            await self.send("verdict", **verdict)

    @staticmethod
    def _count_invalid(turn: prompts.ParsedTurn, allowed: set[str], stats: Stats) -> None:
        unknown = [c.name for c in turn.calls if c.name not in allowed]
        stats.invalid_tool_calls += len(turn.errors) + len(unknown)
        stats.think_tool_calls += turn.think_calls
        for error in turn.errors:
            log.info("invalid tool call text (%s): %s", error.error, error.text)
        if unknown:
            log.info("model called tools it does not have: %s", ", ".join(unknown))
        if turn.think_calls:
            log.info("ignored %d tool call(s) written inside the think channel", turn.think_calls)

    async def _generate(
        self,
        conv: Conversation,
        unit: str,
        n: int,
        budget: int,
        reader: channels.Reader,
        findings: FindingStream,
        prose: bool,
    ) -> Generation:
        if budget <= 0:
            return Generation("length", {}, [])
        rid = self.scheduler.new_rid()
        req = GenRequest(
            rid=rid,
            prompt=conv.prompt,
            segments=conv.segments,
            max_tokens=budget,
            temp=self.config.temp,
            top_p=self.config.top_p,
            seed=rid,
            priority=self.priority.rank,
            owner=self.owner,
            about=About(unit, conv.kind, conv.tries, n),
        )
        self.last_rid = rid
        pace = ProgressPace()
        # aclosing: leaving early (cancelled, an error) cancels the generation in the engine now, not at GC
        async with contextlib.aclosing(self.scheduler.stream(req)) as events:
            async for event in events:
                if event.progress is not None and pace.due(event.progress[0]):
                    stage, done, total = event.progress
                    await self.send("progress", stage=stage, tokens=done, total=total, detail=f"round {n + 1}")
                if event.text:
                    response = reader.feed(event.text)
                    await findings.feed(reader)
                    if prose and response:
                        await self.send("text", text=response)
                if event.finish is not None:
                    if event.finish is Finish.ERROR:
                        error = event.error or Failed(ErrorCode.FAILED, "engine error")
                        if error.code == ErrorCode.TOO_LONG and n > 0:  # the conversation outgrew the context
                            return Generation(Finish.LENGTH, event.stats or {}, [])
                        too_long = error.code == ErrorCode.TOO_LONG
                        raise AgentError(
                            error.code, error.message if too_long else f"generation failed: {error.message}"
                        )
                    if event.finish is Finish.CANCELLED:
                        raise AgentError(ErrorCode.SHUTDOWN, "the daemon cancelled the generation")
                    response = reader.finish()
                    if prose and response:
                        await self.send("text", text=response)
                    return Generation(event.finish, event.stats or {}, list(event.tokens or []))
        raise AgentError(ErrorCode.INTERNAL, "the generation ended without a finish event")

    async def _tool_result(self, call: prompts.ToolCall, allowed: set[str], stats: Stats) -> str:
        """The text the model gets back for one call of its turn."""
        if call.name in ("report_finding", *prompts.VERDICT_TOOLS) and call.name in allowed:
            return "recorded"
        if call.name not in READ_ONLY_TOOLS or call.name not in allowed:  # counted as invalid when parsed
            return f"error: there is no tool named {call.name!r}"
        stats.tool_calls += 1
        await self.send("progress", stage="tool", tokens=stats.generated_tokens, detail=call.name)
        ok, result = await self.ask_tool(call.name, call.arguments)
        result = result[:MAX_TOOL_RESULT_CHARS]
        return result if ok else f"error: {result}"


def conversation(tokenizer, req: dict, effort: str, kind: str = "audit") -> Conversation:
    """The conversation an ``audit``, ``explain`` or ``rule`` message starts: system, file context (if any), the
    unit (and the finding to explain, or to write a rule for with the earlier tries)."""
    specials = prompts.special_strings(tokenizer)
    unit = {"path": req["path"], "unit": req["unit"], "code": req["code"], "context": req["context"]}
    if kind == "explain":
        messages = prompts.explain_messages(**unit, specials=specials, finding=req["finding"])
        return Conversation(messages, prompts.EXPLAIN_TOOLS, effort, specials, kind=kind)
    if kind == "rule":
        tries = list(req.get("tries") or [])
        messages = prompts.rule_messages(**unit, specials=specials, finding=req["finding"], tries=tries)
        return Conversation(messages, prompts.RULE_TOOLS, effort, specials, kind=kind, tries=len(tries))
    alerts = list(req.get("alerts") or [])
    changes = req.get("changes")
    messages = prompts.audit_messages(
        **unit, specials=specials, first_line=req.get("first_line"), alerts=alerts, changes=changes
    )
    return Conversation(
        messages,
        prompts.AUDIT_TOOLS,
        effort,
        specials,
        alerts=alerts,
        refute_from=req.get("refute_from"),
        review=changes is not None,
    )


async def seen(tokenizer, config: AgentConfig, req: dict) -> list[str]:
    """What the model is given for an ``audit`` message, as one hash per way to answer it: first at the request's
    own thinking effort and token budget, then at each higher effort with that effort's own budget (an audit
    that thought longer answers one that would think less). Each hash covers the rendered prompt (system
    prompt, tools, path, unit name, first line, code, context, the changes of a unit under review, effort), the
    budget, the sampling and the tool-round limit: everything but the tool results, which the result store
    checks call by call (backend/store.py)."""
    effort = req.get("thinking_effort") or config.thinking_effort
    out = []
    for e in protocol.EFFORTS[protocol.EFFORTS.index(effort) :]:
        conv = conversation(tokenizer, req, e)
        tokens = await asyncio.to_thread(_locked, _prompt, tokenizer, conv)  # as render's, without its segments
        budget = config.budget(e, req.get("max_tokens") if e == effort else None)
        h = hashlib.sha256(
            f"k3-seen-v1\0{budget}\0{config.temp!r}\0{config.top_p!r}\0{config.max_tool_rounds}\0".encode()
        )
        if req.get("refute_from"):  # the refutation turn's threshold and budget change the answer too
            h.update(f"refute\0{req['refute_from']}\0{config.refute_tokens}\0".encode())
        h.update(array.array("I", tokens).tobytes())
        out.append(h.hexdigest())
    return out


def _prompt(tokenizer, conv: Conversation) -> list[int]:
    return prompts.template(tokenizer, conv.messages, conv.tools, add_generation_prompt=True, effort=conv.effort)


class ProgressPace:
    """At most one progress message per generation every PROGRESS_EVERY seconds, except the first of each stage.

    The engine reports prefill after every chunk and decode every few tokens; on a fast model that is a message
    per step per request, more than an editor can show and a send each on the event loop. A new stage (reading,
    then generating) always goes out at once.
    """

    def __init__(self, every: float = PROGRESS_EVERY):
        self._every = every
        self._stage = ""
        self._sent = 0.0

    def due(self, stage: str) -> bool:
        now = time.monotonic()
        if stage == self._stage and now - self._sent < self._every:
            return False
        self._stage, self._sent = stage, now
        return True


def _continued(tokenizer, conv: Conversation, generated: list[int], tool_messages: list[dict]) -> list[int]:
    """The next round's prompt: prompt + generated tokens + the renderer's tool turn and generation prompt.

    A renderer that does not render tool results as an append (none known) gets the whole conversation
    re-rendered instead: correct, but a prompt-cache miss and the renderer's view of the history.
    """
    try:
        suffix = prompts.continuation(
            tokenizer, conv.messages[:-1], conv.messages[-1], tool_messages, conv.tools, conv.effort
        )
    except prompts.ContinuationError as exc:
        log.warning("%s: re-rendering the whole conversation", exc)
        return prompts.template(
            tokenizer, [*conv.messages, *tool_messages], conv.tools, add_generation_prompt=True, effort=conv.effort
        )
    return [*conv.prompt, *generated, *suffix]


def _locked(render, *args):
    """Render off the event loop, one render at a time: the tokenizer is shared by every request."""
    with _RENDER_LOCK:
        return render(*args)


_RENDER_LOCK = threading.Lock()


def clip_reasoning(text: str) -> str:
    """The reasoning a finding carries: the end of the think channel (where the model concluded), bounded."""
    text = text.strip()
    if len(text) <= protocol.MAX_REASONING_CHARS:
        return text
    return "…" + text[-(protocol.MAX_REASONING_CHARS - 1) :].lstrip()


class FindingStream:
    """Sends each ``report_finding`` call as a ``finding`` as soon as the call closes in a tool-call section.

    The model's arguments are untrusted: a call that fails the protocol's finding schema, or names a line past
    the ``lines`` of the audited unit (``k3lsp.wire.bounds.fit_lines``, the editor's check too), is dropped with a
    log line, and so is every finding beyond ``bounds`` (counted as ``findings_over_limit``); once they are
    full, calls are no longer parsed as they close, only counted when the turn ends. Each finding carries the
    reasoning written before it in the think channel. ``introduced`` is kept only for a unit under ``review``:
    without a change in view the model cannot know what introduced a bug.
    """

    def __init__(
        self,
        send: Send,
        stats: Stats,
        enabled: bool,
        lines: int,
        bounds: FindingBounds,
        sent: list[dict] | None = None,
        review: bool = False,
    ):
        self._send = send
        self.sent = [] if sent is None else sent  # every finding sent for the request, in order
        self._stats = stats
        self._enabled = enabled
        self._lines = lines
        self._bounds = bounds
        self._review = review
        self._seen: set[int] = set()
        self._closed = (0, 0)  # (sections closed, calls closed in the open one) when last parsed

    async def feed(self, reader: channels.Reader) -> None:
        """Called after every new piece; parses only when a call just closed in the open section."""
        if not self._enabled or self._bounds.full or not reader.open_section:
            return
        closed = (len(reader.sections), reader.section.count(prompts.CALL_CLOSE))
        if closed == self._closed or closed[1] == 0:
            return
        self._closed = closed
        calls, _ = prompts.parse_calls([*reader.sections, prompts.closed_calls(reader.section)])
        await self.sweep(calls, reader.reasoning)

    async def sweep(self, calls: list[prompts.ToolCall], reasoning: str) -> None:
        """Send the report_finding calls not sent yet (calls are identified by their index in the turn)."""
        if not self._enabled:
            return
        for call in calls:
            if call.name != "report_finding" or call.index in self._seen:
                continue
            self._seen.add(call.index)
            try:
                finding, cut = fit_lines(protocol.validate_finding(call.arguments), self._lines)
                if cut:  # the daemon sends a finding whole or not at all
                    raise protocol.ProtocolError(cut[0])
            except protocol.ProtocolError as exc:
                self._stats.dropped_findings += 1
                log.info("dropped invalid finding from report_finding call %d: %s", call.index, exc)
                continue
            for own in ("reasoning", "verdict", "witness"):  # set by the think channel and the editor, not the call
                finding.pop(own, None)
            if not self._review:
                finding.pop("introduced", None)
            if reasoning.strip():
                finding["reasoning"] = clip_reasoning(reasoning)
            why = self._bounds.admit(finding)
            if why is not None:
                self._stats.findings_over_limit += 1
                if self._bounds.dropped == 1:
                    log.warning("dropping findings beyond the bounds of one unit: %s", why)
                continue
            self._stats.findings += 1
            self.sent.append(finding)
            await self._send("finding", finding=finding)
