"""Audit orchestration shared by the language server and ``k3lsp audit``: units in, findings per unit out.

The expensive thing is the model, so this module's job is to ask it as little as possible: a unit whose
content key (text + context) was audited before under the same result key (``k3lsp.resultkey``: the
daemon's checkpoint, prompt version, thinking effort and identity) is answered from the cache, and only the
others are sent, a bounded number at a time, interactive ones first. Tool requests of the model are
answered from the workspace through the sandbox in ``k3lsp.sandbox``. Only complete audits are cached: one
the daemon cut short (deadline, token or tool-round budget, loop guard) is shown with what it found,
reported as incomplete (:attr:`UnitResult.cut_short`) and audited again next time, never kept as a lasting
"no findings".

Errors come in three kinds (``k3lsp.protocol``): a transient one (the daemon restarts, its queue is full) is
retried after a backoff, a bounded number of times (RETRY_DELAYS); a request-level one fails that unit only
and is never retried (a unit too long to audit is remembered, so it is not even sent again); a set-up one
(keys, versions) is not retried. When the daemon cannot serve at all, the audit ends with one
:class:`BackendUnavailable` (after the cached units were delivered), the state is reported through
``on_state``, and the next audit simply tries again (the client's socket reconnects by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from k3lsp import loading, protocol, resultkey, sandbox, sanitize
from k3lsp.bounds import OVER_LIMIT, FindingBounds, bounded_stats
from k3lsp.cache import ResultCache
from k3lsp.client import BackendClient, BackendError, ClientOptions
from k3lsp.options import Options
from k3lsp.protocol import CodedError, CodeKind, ErrorCode, kind_of
from k3lsp.resultkey import ResultKey
from k3lsp.slots import PrioritySlots
from k3lsp.units import Unit

log = logging.getLogger(__name__)

RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds before each new attempt after a transient error; then give up
LOAD_POLL = 1.0  # seconds between status questions to a daemon that is loading its model
DEFAULT_CONCURRENCY = 4  # in-flight audit requests per client; the daemon batches them
COMPLETE = "stop"  # the finish reason of an audit the model ended itself, on its end-of-message token


class BackendUnavailable(CodedError):
    """The daemon cannot be used right now (``code``: a transient or set-up :class:`ErrorCode`)."""


class _Transient(BackendUnavailable):
    """A transient error of one attempt (``code`` of kind CodeKind.TRANSIENT): worth another, later."""


def retried(code: str) -> bool:
    """Whether a request that ended with ``code`` is sent again later (with backoff and a bound)."""
    return kind_of(code) is CodeKind.TRANSIENT


def concerns_daemon(code: str) -> bool:
    """Whether ``code`` says the daemon as a whole cannot serve us now (as opposed to one request failing): the
    editor shows one message, keeps cached findings and retries later. Among them ``loading`` (the daemon is
    still reading its model and a request waited longer than it allows) and ``load_failed`` (it could not load
    its model and exits)."""
    return kind_of(code) is not CodeKind.REQUEST


@dataclass(frozen=True)
class UnitResult:
    """The raw findings for one unit (protocol-valid, lines relative to the unit) and where they came from.

    ``refusal`` is set (and ``findings`` empty) for a unit the daemon refused as too long to audit.
    """

    unit: Unit
    findings: list[dict]
    cached: bool
    stats: dict = field(default_factory=dict)
    refusal: str | None = None

    @property
    def cut_short(self) -> str | None:
        """Why the daemon stopped the audit before the model ended it (e.g. ``deadline``); None if complete,
        or never started (a refusal)."""
        return None if self.refusal is not None else cut_short(self.stats)

    @property
    def over_limit(self) -> int:
        """Findings dropped beyond ``k3lsp.bounds``, by the daemon and by this side together."""
        return _count(self.stats.get(OVER_LIMIT))


def cut_short(stats: dict) -> str | None:
    """The finish reason of an incomplete audit from its ``done`` stats; None for a complete one. A missing
    or odd reason counts as incomplete: only a daemon that says the model finished gets its result kept."""
    reason = stats.get("finish_reason")
    if reason == COMPLETE:
        return None
    return reason[:64] if isinstance(reason, str) and reason else "unknown"


Progress = Callable[[Unit, dict], None]  # (unit, the daemon's progress message)


def describe(unit: Unit, progress: dict) -> str:
    """A progress message as one status-line note: ``copy_msg: prefill 512/1,399 tokens``, or while the daemon
    loads ``copy_msg: backend loading (42 %, weights)`` (the daemon's words sanitised, like all its text)."""
    stage, done, total = progress["stage"], progress.get("tokens"), progress.get("total")
    if stage in ("prefill", "decode") and done is not None and total:
        return sanitize.line(f"{unit.name}: {stage} {done:,}/{total:,} tokens")
    if stage == "loading" and progress.get("detail"):  # the daemon's own words: backend loading (42 %, ...)
        return sanitize.line(f"{unit.name}: {progress['detail']}")
    detail = f" {progress['detail']}" if stage == "tool" and progress.get("detail") else ""
    return sanitize.line(f"{unit.name}: {stage}{detail}")


@dataclass(frozen=True)
class Lookup:
    """What the cache answered for some units, and what still needs the daemon."""

    hits: list[UnitResult]
    misses: list[Unit]
    down: BackendUnavailable | None  # set when the daemon is unusable but the last model id served the cache


@dataclass
class Counters:
    """What this process asked of the daemon: exposed by ``k3lsp.status`` and the CLI's stats line."""

    units: int = 0  # units looked up
    cached: int = 0  # answered from the cache
    sent: int = 0  # audit requests sent to the daemon
    audited: int = 0  # audit requests that ended with `done`
    incomplete: int = 0  # ... of which the daemon cut short: shown, not cached
    from_store: int = 0  # ... of which the daemon answered from its result store (nothing generated)
    cancelled: int = 0
    failed: int = 0
    refused: int = 0  # too long to audit: not sent again
    retries: int = 0  # attempts repeated after a transient error
    findings: int = 0
    over_limit: int = 0  # findings dropped beyond k3lsp.bounds (by the daemon or here)
    tokens: int = 0  # prompt + generated tokens, as the daemon reported them

    @classmethod
    def total(cls, counters: Iterable[Counters]) -> Counters:
        """The sum of several auditors' counters (one per daemon)."""
        out = cls()
        for c in counters:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(c, f.name))
        return out


@dataclass(frozen=True)
class BackendState:
    """The ``k3lsp/status`` notification's payload."""

    state: str  # disconnected (not connected yet) | connecting | loading (the daemon reads its model) | connected
    #             | down | unauthorized
    queued: int
    running: int
    message: str
    percent: int | None = None  # with state loading: how much of the model is read (0..100), when the daemon says


def _count(value: object) -> int:
    """A token count from the daemon's free-form stats; anything but a non-negative int counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def state_for(code: str) -> str:
    """The backend state an editor shows when ``code`` makes the daemon unusable (ErrorCode.state)."""
    known = ErrorCode.of(code)
    return known.state if known else "down"


def _serving(welcome: dict) -> str:
    return f"{welcome.get('model')} ({welcome.get('experts')} experts, {welcome.get('ranks')} ranks)"


def not_connected(endpoint: str) -> str:
    """Why nothing is known yet: the daemon is first contacted when a C file is opened or audited."""
    return f"not connected yet to {endpoint}: it is contacted when a C file is opened or audited"


def client_options(options: Options, name: str) -> ClientOptions:
    return ClientOptions(
        endpoint=options.endpoint,
        connect_timeout=3.0,
        client_name=name,
        server_key=Path(options.server_key).expanduser() if options.server_key else None,
        client_key=Path(options.client_key).expanduser() if options.client_key else None,
        insecure=options.insecure,
    )


class Auditor:
    """One daemon connection, the cache and the bookkeeping; used from one event loop."""

    def __init__(
        self,
        options: Options,
        cache: ResultCache,
        *,
        client_name: str = "k3lsp",
        concurrency: int = DEFAULT_CONCURRENCY,
        on_state: Callable[[BackendState], None] | None = None,
        on_tool: Callable[[dict, bool, str], None] | None = None,
    ):
        self.options = options
        self.cache = cache
        self.counters = Counters()
        self.welcome: dict | None = None  # the last welcome: the result key survives an outage
        self._result_key: ResultKey | None = None  # what results are cached under; None: no checkpoint named
        self._client_name = client_name
        self._client = BackendClient(client_options(options, client_name))
        self._connected = False
        self._connecting: asyncio.Future | None = None
        self._slots = PrioritySlots(concurrency, on_change=self._notify)
        self._on_state = on_state
        self._on_tool = on_tool  # (tool_request, ok, answer): what the model read is the user's business
        self._state, self._message = "disconnected", not_connected(options.endpoint)
        self._percent: int | None = None
        self._load_watch: asyncio.Task | None = None
        self._refused: dict[tuple, str] = {}  # (unit key, result key, prompt limit) -> the refusal

    # --- state -------------------------------------------------------------------------------------------

    @property
    def state(self) -> BackendState:
        return BackendState(self._state, self._slots.queued, self._slots.running, self._message, self._percent)

    def _set_state(self, state: str, message: str = "", percent: int | None = None) -> None:
        self._state, self._message, self._percent = state, sanitize.line(message), percent  # it quotes the daemon
        self._notify()

    def _notify(self) -> None:
        if self._on_state is not None:
            self._on_state(self.state)

    async def reconfigure(self, options: Options) -> None:
        """New settings; a new endpoint or key means a new connection."""
        old, self.options = self.options, options
        if client_options(old, self._client_name) != client_options(options, self._client_name):
            self._stop_load_watch()
            await self._client.close()
            self._client = BackendClient(client_options(options, self._client_name))
            self._connected = False
            self.welcome, self._result_key = None, None  # another daemon: the old one's results are not its
            self._set_state("disconnected", not_connected(options.endpoint))

    async def close(self) -> None:
        self._stop_load_watch()
        await self._client.close()

    # --- connection --------------------------------------------------------------------------------------

    async def connect(self) -> dict:
        """Say hello if we have not since the last failure; one hello at a time however many callers wait."""
        if self._connected and self.welcome is not None:
            return self.welcome
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._hello())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _hello(self) -> dict:
        self._set_state("connecting", f"connecting to {self.options.endpoint}")
        try:
            welcome = await self._client.connect()
        except BackendError as exc:
            raise self._unavailable(exc.code, str(exc)) from exc
        key = resultkey.for_welcome(welcome, daemon=self._client.daemon_identity)
        self.welcome, self._result_key, self._connected = welcome, key, True
        if loading.is_loading(welcome):
            self._loading(welcome.get("loading"))
        else:
            self._set_state("connected", _serving(welcome))
        return welcome

    # --- a daemon that is loading its model --------------------------------------------------------------

    def _loading(self, progress: object) -> None:
        """Show how far the daemon's load is, and keep asking until it serves (requests sent meanwhile wait
        on the daemon, which bounds the wait)."""
        self._set_state("loading", loading.describe(progress), loading.percent(progress))
        if self._load_watch is None or self._load_watch.done():
            self._load_watch = asyncio.ensure_future(self._watch_load())

    async def _watch_load(self) -> None:
        while self._state == "loading":
            await asyncio.sleep(LOAD_POLL)
            try:
                status = await self._client.status(self._client.options.connect_timeout)
            except BackendError as exc:
                self._unavailable(exc.code, str(exc))
                return
            if self._state != "loading":  # an audit found the daemon gone meanwhile
                return
            if loading.is_loading(status):
                self._set_state(
                    "loading", loading.describe(status.get("loading")), loading.percent(status.get("loading"))
                )
                continue
            self._connected = False  # loaded: a fresh hello, whose welcome describes the model being served
            with contextlib.suppress(BackendUnavailable):  # _hello has reported it
                await self.connect()
            return

    def _stop_load_watch(self) -> None:
        if self._load_watch is not None:
            self._load_watch.cancel()
            self._load_watch = None

    def _unavailable(self, code: str, message: str) -> BackendUnavailable:
        self._connected = False
        where = "" if self.options.endpoint in message else f" at {self.options.endpoint}"
        text = message if message.startswith("k3 audit backend") else f"k3 audit backend{where}: {message}"
        text = sanitize.line(text)
        self._set_state(state_for(code), text)
        return BackendUnavailable(code, text)

    def _refusal_key(self, unit: Unit) -> tuple:
        """A refusal holds for this unit's text under this result key (model, prompt version...) and prompt limit."""
        return unit.key, self._result_key, self.welcome["limits"].get("max_prompt_tokens")

    # --- audits ------------------------------------------------------------------------------------------

    @property
    def result_key(self) -> ResultKey | None:
        """What this daemon's results are cached under; None before its first welcome or when it has none."""
        return self._result_key

    async def lookup(
        self,
        units: Sequence[Unit],
        *,
        priority: str = "interactive",
        force: bool = False,
        also: Sequence[ResultKey] = (),
    ) -> Lookup:
        """Split units into cached results and units to audit at ``priority`` (its thinking effort, or a higher
        one, answers); ``force`` (re-audit) treats everything as a miss. ``also``: the result keys of other
        configured daemons whose results answer too (the same checkpoint and prompt version; ``k3lsp.pool``).

        Raises BackendUnavailable only when the daemon was never reached (no model id to look results up by).
        """
        try:
            await self.connect()
            down = None
        except BackendUnavailable as exc:
            if self.welcome is None:
                raise
            down = exc
        effort = self.options.effort(priority)
        keys = (
            []
            if force or self._result_key is None
            else [
                key
                for rk in (self._result_key, *also)
                if rk.same_answers(self._result_key)
                for key in rk.answering(effort)
            ]
        )
        hits, misses = [], []
        for unit in units:
            self.counters.units += 1
            refusal = self._refused.get(self._refusal_key(unit))
            if refusal is not None:  # even when forced: it would be refused the same way
                hits.append(UnitResult(unit, [], cached=True, refusal=refusal))
                continue
            hit = next((row for key in keys if (row := self.cache.get(unit.key, key)) is not None), None)
            if hit is None:
                misses.append(unit)
            else:
                self.counters.cached += 1
                hits.append(UnitResult(unit, list(hit.findings), cached=True, stats=dict(hit.stats)))
        return Lookup(hits, misses, down)

    async def audit(
        self,
        root: Path | None,
        path: str,
        units: Sequence[Unit],
        *,
        priority: str = "interactive",
        on_progress: Progress | None = None,
    ) -> AsyncIterator[UnitResult]:
        """Yield a result per unit as it becomes known: cached ones first, then audited ones as they finish."""
        found = await self.lookup(units, priority=priority)
        for hit in found.hits:
            yield hit
        if found.misses and found.down is not None:
            raise found.down
        results = self.audit_uncached(root, path, found.misses, priority=priority, on_progress=on_progress)
        async with contextlib.aclosing(results) as stream:
            async for result in stream:
                yield result

    async def audit_uncached(
        self,
        root: Path | None,
        path: str,
        units: Sequence[Unit],
        *,
        priority: str = "interactive",
        fresh: bool = False,
        on_progress: Progress | None = None,
    ) -> AsyncIterator[UnitResult]:
        """Send units to the daemon (bounded, by priority) and yield their results as they finish.

        ``path`` is workspace-relative (what the model and its tools see). ``fresh`` (a re-audit) asks the
        daemon to audit again rather than answer from its result store. ``on_progress`` gets the daemon's
        progress messages (prefill, decode) per unit. Raises BackendUnavailable once the daemon cannot be used;
        leaving early or cancelling the caller cancels the requests on the daemon.
        """
        tasks = [
            asyncio.ensure_future(self._audit_one(root, path, unit, priority, fresh, on_progress)) for unit in units
        ]
        try:
            for next_done in asyncio.as_completed(tasks):
                result = await next_done
                if result is not None:
                    yield result
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _audit_one(
        self, root: Path | None, path: str, unit: Unit, priority: str, fresh: bool, on_progress: Progress | None
    ) -> UnitResult | None:
        """One unit, retried after a transient error (RETRY_DELAYS), never after a request-level one."""
        async with self._slots.hold(priority):
            for delay in (*RETRY_DELAYS, None):
                try:
                    return await self._request(root, path, unit, priority, fresh, on_progress)
                except _Transient as exc:
                    if delay is None:
                        raise self._unavailable(exc.code, str(exc)) from None
                    log.info("audit of %s: %s (%s); trying again in %g s", unit.name, exc, exc.code, delay)
                    self.counters.retries += 1
                    await asyncio.sleep(delay)
        return None

    async def _request(
        self, root: Path | None, path: str, unit: Unit, priority: str, fresh: bool, on_progress: Progress | None
    ) -> UnitResult | None:
        fields = {
            "path": path,
            "unit": unit.name,
            "code": unit.text,
            "context": unit.sent_context,  # the file's shared declarations: one cached prefix per file
            "first_line": unit.start_line + 1,
            "priority": priority,
            "thinking_effort": self.options.effort(priority),
        } | ({"fresh": True} if fresh else {})
        findings: list[dict] = []
        bounds = FindingBounds()  # the daemon bounds them too, but it may not be ours
        try:
            await self.connect()
            self.counters.sent += 1
            stream = self._client.stream("audit", fields, tools=lambda req: self._tool(root, req))
            async with contextlib.aclosing(stream) as messages:
                async for message in messages:
                    kind = message["kind"]
                    if kind == "finding":
                        why = bounds.admit(message["finding"])
                        if why is None:
                            findings.append(message["finding"])
                        elif bounds.dropped == 1:
                            log.warning("audit of %s: dropping what the daemon sends beyond: %s", unit.name, why)
                    elif kind == "progress" and on_progress is not None:
                        on_progress(unit, message)
                    elif kind == "done":
                        stats = bounded_stats(message["stats"])
                        if bounds.dropped:
                            stats = stats | {OVER_LIMIT: _count(stats.get(OVER_LIMIT)) + bounds.dropped}
                        return self._store(unit, findings, stats, fields["thinking_effort"])
                    elif kind == "cancelled":
                        self.counters.cancelled += 1
                        return None
                    elif kind == "error":
                        return self._failed(unit, message["code"], message["message"])
        except asyncio.CancelledError:
            self.counters.cancelled += 1
            raise
        except BackendUnavailable as exc:
            if retried(exc.code):
                raise _Transient(exc.code, str(exc)) from None
            raise
        except BackendError as exc:
            return self._failed(unit, exc.code, str(exc))
        except protocol.ProtocolError as exc:  # this unit cannot be sent (over the frame limit): it alone fails
            return self._failed(unit, ErrorCode.PROTOCOL, str(exc))
        return None

    def _store(self, unit: Unit, findings: list[dict], stats: dict, effort: str) -> UnitResult:
        """Keep a complete audit's result; one cut short is returned (to be shown as incomplete) and forgotten."""
        result = UnitResult(unit, findings, cached=False, stats=stats)
        if result.cut_short is not None:
            self.counters.incomplete += 1
            log.info("audit of %s was cut short (%s): not cached", unit.name, result.cut_short)
        elif self._result_key is not None and stats.get("from_store") is not True:
            # An answer from the daemon's store is another person's audit: shown, asked for again next time,
            # never filed as this editor's own (docs/team.md, the store's trust model).
            self.cache.put(unit.key, self._result_key.digest(effort), findings, stats)
        self.counters.audited += 1
        self.counters.from_store += stats.get("from_store") is True
        self.counters.findings += len(findings)
        self.counters.over_limit += result.over_limit
        self.counters.tokens += sum(_count(stats.get(name)) for name in ("prompt_tokens", "generated_tokens"))
        return result

    def _failed(self, unit: Unit, code: str, message: str) -> UnitResult | None:
        """One request failed: a transient reason is retried, a set-up one ends the whole audit, any other
        fails this unit only (a unit too long to audit is remembered and never sent again)."""
        if retried(code):
            raise _Transient(code, message)
        self.counters.failed += 1
        if concerns_daemon(code):
            raise self._unavailable(code, message)
        log.warning("audit of %s failed (%s): %s", unit.name, code, message)
        if code == ErrorCode.TOO_LONG:
            self.counters.refused += 1
            self._refused[self._refusal_key(unit)] = refusal = sanitize.line(message)
            return UnitResult(unit, [], cached=False, refusal=refusal)
        return None

    async def _tool(self, root: Path | None, request: dict) -> tuple[bool, str]:
        """Answer a model's tool call from the workspace; the sandbox refuses anything outside ``root``.

        No root (an untitled buffer, a file outside the workspace folder): no tools at all, since the
        file's own folder may be the home directory.
        """
        if root is None:
            ok, text = False, f"{request['tool']}: no workspace folder holds this file, so no workspace tools"
        else:
            try:
                call = asyncio.to_thread(sandbox.run_tool, root, request["tool"], request["args"])
                ok, text = await asyncio.wait_for(call, sandbox.TOOL_SECONDS)
            except TimeoutError:  # the model (and the audit) must not wait for ever; the thread ends on its own
                ok, text = False, f"{request['tool']}: no answer within {sandbox.TOOL_SECONDS:g} s; ask for less"
        if self._on_tool is not None:
            self._on_tool(request, ok, text)
        return ok, text

    # --- explain and status ------------------------------------------------------------------------------

    async def explain(self, root: Path | None, path: str, unit: Unit, finding: dict) -> AsyncIterator[str]:
        """Stream the model's explanation of one finding; raises BackendUnavailable or BackendError."""
        await self.connect()
        fields = {
            "path": path,
            "unit": unit.name,
            "code": unit.text,
            "context": unit.context,
            "finding": finding,
            "thinking_effort": self.options.effort("interactive"),
        }
        stream = self._client.stream("explain", fields, tools=lambda req: self._tool(root, req))
        async with contextlib.aclosing(stream) as messages:
            async for message in messages:
                if message["kind"] == "text":
                    yield message["text"]
                elif message["kind"] == "error":  # an explanation is asked for by a person: not retried
                    if concerns_daemon(message["code"]):
                        raise self._unavailable(message["code"], message["message"])
                    raise BackendError(message["code"], message["message"])
                elif message["kind"] == "cancelled":  # the daemon's decision, not our task's cancellation
                    raise BackendError(ErrorCode.CANCELLED, "the audit daemon cancelled the explanation")

    async def status(self) -> dict:
        """This side's counters and state, with the daemon's own status when it answers."""
        out: dict = {
            "endpoint": self.options.endpoint,
            "state": asdict(self.state),
            "counters": asdict(self.counters),
            "welcome": sanitize.data(self.welcome),
        }
        try:
            await self.connect()
            out["backend"] = sanitize.data(await self._client.status(self._client.options.connect_timeout))
        except (BackendUnavailable, BackendError) as exc:
            out["backend"] = None
            out["error"] = str(exc)
        return out
