"""The audit core's one dispatcher: the daemons of the ``endpoint`` setting, one queue, one priority gate.

Every front end runs its units through :meth:`Pool.audit`: a cache lookup first (``k3lsp.core.results``), then
the misses as jobs in one queue, interactive before background, FIFO within each. Each daemon takes at most
``slots`` requests at a time (it batches what it is sent), so a workspace audit never fills the client side
ahead of the focused file: the next free slot goes to the oldest interactive job. Interactive jobs go to the
first usable daemon in the configured order (one file's units share its prompt cache); background jobs to any
usable daemon (a faster one simply takes more). With one endpoint, that is all there is.

When a request fails for a reason that concerns its daemon, the daemon is marked as such (``k3lsp.core.connection``)
and the job goes back to the queue at once: another usable daemon takes it without waiting. When none is
usable, the job waits out a backoff (RETRY_DELAYS), the failed daemons are asked again, and after the last
delay the job is left, with the reason, in its run's summary. A daemon that answers ``busy`` is up but has as
many requests of this user open as it takes (its limit counts every process of the user: eight batch runs
share it): the job asks again after a backoff with jitter, at no cost in attempts, until the daemon's own
request deadline has passed since its first ``busy`` (every request open then has ended by that time), and is
left with the daemon's reason after that.

A run ends when each of its jobs has ended in exactly one of: a result, a failure of its own, or left; so every
path out of a job's task ends the job (a failure on this side, a front end's callback raising included, is a
failure of that unit that says so), and a run never waits on a task that has died. Leaving a run early
(cancelling the front end's task) withdraws its jobs: queued ones are dropped, running ones cancelled on the
daemon.

A run makes one connection check (:meth:`Pool.reach`): daemons that are not connected are asked once, and
waited for only when none is; each request then goes out on a connection known to be up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from k3lsp.core import request, tasks
from k3lsp.core.answers import OnTool, ToolAnswerer
from k3lsp.core.client import DaemonClient, DaemonError
from k3lsp.core.connection import Connection, DaemonState, DaemonUnavailable, TransportFactory, client_options
from k3lsp.core.options import Options
from k3lsp.core.replies import DoneStats
from k3lsp.core.results import Lookup, Results
from k3lsp.core.run import Counters, Failure, Noted, Progress, Summary, Target, UnitResult
from k3lsp.units.split import Unit
from k3lsp.wire import sanitize
from k3lsp.wire.address import ResultKey
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import ConnState, ErrorCode, Priority

log = logging.getLogger(__name__)

RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds before asking failed daemons again while no daemon can take work
ATTEMPTS = 1 + len(RETRY_DELAYS)  # requests one job may make before it is left (each daemon failure costs one)
BUSY_PATIENCE = 600.0  # seconds a job waits on a busy daemon whose welcome names no deadline (the daemon's default)
DEFAULT_SLOTS = 4  # requests in flight per daemon; the daemon batches them
STATUS_WAIT = 1.0  # seconds `status` waits for a connected daemon's own status


class Owner(Protocol):
    """Whoever submitted jobs to the pool (an :class:`AuditRun`): how its requests are asked, and where their
    outcomes go. The pool knows a run only as this: it dispatches jobs and tells their owner, the owner drives
    the pool (lookup, submit, withdraw), never the other way round."""

    priority: Priority
    effort: str
    fresh: bool
    refute_from: str | None  # the refutation turn's threshold, None without one
    variant: str

    def ended(self, target: Target, outcome: UnitResult | Failure | None, why: str | None) -> None: ...

    def noted(self, endpoint: str, why: DaemonUnavailable, live: list[str]) -> None: ...

    def progress(self, unit: Unit, message: dict) -> None: ...


@dataclass(eq=False)
class _Job:
    target: Target
    run: Owner
    attempts: int = 0
    task: asyncio.Task | None = None  # its request, while one is in flight
    waiting: asyncio.Task | None = None  # its backoff, while it waits for a daemon
    seq: int = 0
    busy: int = 0  # `busy` answers so far
    busy_since: float | None = None  # loop time of the first


class AuditRun:
    """One front end's units. ``await lookup()`` gives what the cache knows at once; ``audited()`` yields the
    rest as the daemons finish them (and the cached ones first when ``lookup`` was not called); ``summary``
    says what it all came to once ``audited()`` is exhausted. Leaving ``audited()`` early withdraws the
    run's work from the daemons."""

    def __init__(self, pool: Pool, targets: Sequence[Target], priority: Priority, force: bool, fresh: bool):
        self.pool, self.targets, self.priority, self.force, self.fresh = pool, list(targets), priority, force, fresh
        self.effort = pool.options.effort(priority)
        self.refute_from = pool.options.refute_sent()  # the refutation turn's threshold, None without one
        self.variant = pool.options.variant()
        self.summary = Summary(units=len(self.targets))
        self.misses: list[Target] | None = None  # known after `lookup`
        self._usable: list[Connection] = []
        self._outcomes: asyncio.Queue[UnitResult | Failure | Target | Noted] = asyncio.Queue()

    async def lookup(self) -> list[UnitResult]:
        """The cached results and the one connection check, once per run. With a daemon connected, the cache
        answers first and the check comes only for the misses. With none, the check comes first: a key
        remembered from an earlier welcome answers a run only once the hello confirms it (a daemon that now
        serves another checkpoint under the same name must not be answered for by the old one's results), or
        when no daemon answers at all (its results are the best there is, and say they are cached)."""
        if self.misses is not None:
            return []
        pool = self.pool
        pool.counters.units += len(self.targets)
        checked = not pool.usable()
        if checked:
            self._usable = await pool.reach()
        keys = pool.answer_keys()
        found = pool.lookup(self.targets, self.priority, force=self.force)
        hits = self._counted(found.hits)
        if found.misses and not checked:
            self._usable = await pool.reach()
            if pool.answer_keys() != keys:  # the hello named another checkpoint: its results, not the old ones
                found = pool.lookup(found.misses, self.priority, force=self.force)
                hits += self._counted(found.hits)
        self.misses = found.misses
        return hits

    async def audited(self, on_progress: Progress | None = None) -> AsyncIterator[UnitResult]:
        """The results of the units the cache did not have, as they finish. ``on_progress`` gets the daemons'
        progress messages (prefill, decode) per unit, in the consumer's own iteration: what it raises reaches
        the consumer, and the run's jobs are withdrawn at once (the daemon hears ``cancel``), not whenever the
        abandoned stream is collected."""
        async with contextlib.aclosing(self.outcomes()) as outcomes:
            async for outcome in outcomes:
                if isinstance(outcome, Noted):
                    if on_progress is not None:
                        on_progress(outcome.unit, outcome.message)
                elif isinstance(outcome, UnitResult):
                    yield outcome

    async def outcomes(self) -> AsyncIterator[UnitResult | Failure | Target | Noted]:
        """Every unit's one outcome as it is known (the cached ones first when ``lookup`` was not called): a
        result, a failure, or the target left without a daemon; and between them, in the same stream, the
        daemons' progress messages (prefill, decode) on a unit, so one consumer awaits both."""
        for hit in await self.lookup():
            yield hit
        assert self.misses is not None
        if not self.misses:
            return
        if not self._usable:
            self.summary.left = list(self.misses)
            self.summary.unavailable = self.pool.why_unusable()
            for target in self.misses:
                yield target
            return
        jobs = self.pool.submit(self.misses, self)
        pending = len(jobs)
        try:
            while pending:
                outcome = await self._outcomes.get()
                if isinstance(outcome, Noted):
                    yield outcome
                    continue
                pending -= 1
                if isinstance(outcome, UnitResult):
                    self.summary.add(outcome)
                elif isinstance(outcome, Failure):
                    self.summary.failed.append(outcome)
                else:
                    self.summary.left.append(outcome)
                yield outcome
        finally:
            self.pool.withdraw(jobs)

    def _counted(self, hits: list[UnitResult]) -> list[UnitResult]:
        for hit in hits:
            self.pool.counters.cached += hit.refusal is None
            self.summary.add(hit)
        return hits

    def ended(self, target: Target, outcome: UnitResult | Failure | None, why: str | None) -> None:
        """A unit of this run has its one outcome: a result, a failure, or (None) left with ``why``."""
        if outcome is None:
            self.summary.unavailable = why
        self._outcomes.put_nowait(target if outcome is None else outcome)

    def progress(self, unit: Unit, message: dict) -> None:
        """A daemon's progress message on a unit of this run, in the same stream as the outcomes."""
        self._outcomes.put_nowait(Noted(unit, message))

    def noted(self, endpoint: str, why: DaemonUnavailable, live: list[str]) -> None:
        """A daemon failed while this run had work on it."""
        takes = f"; its units go to {', '.join(live)}" if live else ""
        note = sanitize.line(f"{why}{takes}")
        if note not in self.summary.dropped:
            self.summary.dropped.append(note)


@dataclass
class _Queue:
    """Jobs waiting for a slot: interactive before background, each FIFO."""

    lanes: dict[Priority, collections.deque[_Job]] = field(
        default_factory=lambda: {p: collections.deque() for p in Priority}
    )

    def __len__(self) -> int:
        return sum(len(lane) for lane in self.lanes.values())

    def put(self, job: _Job) -> None:
        self.lanes[job.run.priority].append(job)

    def take(self, interactive_too: bool) -> _Job | None:
        """The next job: interactive ones only for the first usable daemon."""
        order = list(Priority) if interactive_too else [Priority.BACKGROUND]
        return next((self.lanes[p].popleft() for p in order if self.lanes[p]), None)

    def drop(self, job: _Job) -> None:
        with contextlib.suppress(ValueError):
            self.lanes[job.run.priority].remove(job)


class Pool:
    """The daemons of the ``endpoint`` setting, used from one event loop."""

    def __init__(
        self,
        options: Options,
        cache: ResultCache,
        *,
        transport: TransportFactory = DaemonClient,
        client_name: str = "k3lsp",
        slots: int = DEFAULT_SLOTS,
        on_state: Callable[[DaemonState], None] | None = None,
        on_tool: OnTool | None = None,
    ):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.options, self.cache, self.slots = options, cache, slots
        self.results = Results(cache)
        self.answers = ToolAnswerer(on_tool)
        self.counters = Counters()
        self._transport, self._client_name, self._on_state = transport, client_name, on_state
        self.connections = self._connect(options)
        self._queue = _Queue()
        self._seq = itertools.count()
        self._jobs: set[_Job] = set()  # submitted and not ended: what `close` withdraws
        self._revival: asyncio.Task | None = None  # asking failed daemons again while queued work waits
        self._closed = False

    def _connect(self, options: Options) -> list[Connection]:
        return [
            Connection(client_options(options.only(e), self._client_name), self.cache, self._transport, self._notify)
            for e in options.endpoints
        ]

    # --- state -------------------------------------------------------------------------------------------

    @property
    def state(self) -> DaemonState:
        """Connected while any daemon is; otherwise the first daemon's state. Queued: the jobs no daemon has
        taken yet; running: the requests in flight."""
        queued, running = len(self._queue), sum(c.running for c in self.connections)
        up = [c for c in self.connections if c.state is ConnState.CONNECTED]
        if len(self.connections) == 1 or not up:
            first = self.connections[0].status_line(queued)
            return DaemonState(first.state, queued, running, first.message, first.percent)
        down = len(self.connections) - len(up)
        note = f"; {down} of {len(self.connections)} daemons unreachable" if down else ""
        lines = [c.status_line().message for c in up]
        return DaemonState(ConnState.CONNECTED, queued, running, "; ".join(lines) + note)

    def _notify(self) -> None:
        """Tell the front end the state. What its callback raises is logged, never raised into the pool: a
        dispatch or a job's end cut short there would leave queued work waiting for an event that never comes."""
        if self._on_state is None:
            return
        try:
            self._on_state(self.state)
        except Exception:
            log.exception("the front end failed to take the audit core's state")

    def usable(self) -> list[Connection]:
        return [c for c in self.connections if c.state.usable]

    def why_unusable(self) -> str:
        """Why no daemon can take work: the first daemon's state message."""
        return self.connections[0].status_line().message

    async def reconfigure(self, options: Options) -> None:
        """New settings: another list of daemons means new connections; otherwise each daemon's own settings."""
        old, self.options = self.options, options
        if old.endpoints != options.endpoints:
            await self._close_connections()
            self.connections = self._connect(options)
            self._notify()
            return
        for conn in self.connections:
            new = client_options(options.only(conn.endpoint), self._client_name)
            if new != conn.options:
                await conn.reset(new)

    async def close(self) -> None:
        """Withdraw every job, each left in its run (a run still waiting ends), and close the connections."""
        self._closed = True
        jobs = list(self._jobs)
        running = [t for j in jobs for t in (j.task, j.waiting) if t is not None]
        self.withdraw(jobs)
        for job in jobs:
            job.run.ended(job.target, None, "the audit core was closed")
        await tasks.cancel(self._revival, *running)
        await self._close_connections()

    async def _close_connections(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))

    # --- which daemon ------------------------------------------------------------------------------------

    async def reach(self) -> list[Connection]:
        """The one connection check of a run: the usable daemons, in the configured order.

        Daemons that are not usable are asked again: in the background while another one is usable (work never
        waits for a dead daemon's connect timeout), waited for when none is."""
        idle = [c for c in self.connections if not c.state.usable]
        if len(idle) < len(self.connections):
            for conn in idle:
                tasks.background(conn.ensure(), f"the hello to {conn.endpoint}", DaemonUnavailable)
        else:
            await asyncio.gather(*(c.ensure(fresh=True) for c in idle), return_exceptions=True)
        return self.usable()

    def answer_keys(self) -> list[ResultKey]:
        """The result keys a lookup accepts, the asked daemon's first: the first usable daemon's (else the first
        one with a known key), then every other configured daemon's."""
        ordered = self.usable() + [c for c in self.connections if not c.state.usable]
        return [c.result_key for c in ordered if c.result_key is not None]

    # --- audits ------------------------------------------------------------------------------------------

    def cached(self, targets: Sequence[Target], priority: Priority) -> list[UnitResult]:
        """What the cache knows of these targets now (counted as looked up), asking no daemon: an opened file's
        findings, shown at once."""
        hits = self.lookup(targets, priority).hits
        self.counters.units += len(targets)
        self.counters.cached += sum(hit.refusal is None for hit in hits)
        return hits

    def lookup(self, targets: Sequence[Target], priority: Priority, *, force: bool = False) -> Lookup:
        """What the cache answers now, without asking any daemon (a daemon that answered before is remembered:
        its results are found while it is down or still starting)."""
        keys = self.answer_keys()
        asked = next((c for c in self.usable() + self.connections if c.result_key is not None), None)
        limit = asked.welcome.max_prompt_tokens if asked is not None and asked.welcome is not None else None
        effort, variant = self.options.effort(priority), self.options.variant()
        return self.results.lookup(targets, keys, effort, limit, force=force, variant=variant)

    def audit(
        self,
        targets: Sequence[Target],
        *,
        priority: Priority = Priority.INTERACTIVE,
        force: bool = False,
        fresh: bool = False,
    ) -> AuditRun:
        """A run of units: ``force`` (a re-audit) skips the cache, ``fresh`` asks the daemon not to answer from
        its result store either."""
        return AuditRun(self, targets, priority, force, fresh)

    def submit(self, targets: Sequence[Target], run: Owner) -> list[_Job]:
        jobs = [_Job(t, run, seq=next(self._seq)) for t in targets]
        self._jobs.update(jobs)
        for job in jobs:
            self._queue.put(job)
        self._dispatch()
        return jobs

    def withdraw(self, jobs: Sequence[_Job]) -> None:
        """Drop what is still queued of these jobs and cancel what is in flight (the daemon hears ``cancel``)."""
        for job in jobs:
            self._jobs.discard(job)
            self._queue.drop(job)
            for task in (job.task, job.waiting):
                if task is not None and not task.done():
                    task.cancel()
        self._notify()

    def _dispatch(self) -> None:
        """Give free slots to queued jobs: every usable daemon takes background work, the first interactive;
        with work queued and no daemon usable, ask the failed ones again (RETRY_DELAYS)."""
        if self._closed:
            return
        usable = self.usable()
        for i, conn in enumerate(usable):
            while conn.running < self.slots and (job := self._queue.take(interactive_too=i == 0)) is not None:
                conn.running += 1
                self.counters.sent += 1
                job.task = tasks.background(self._execute(conn, job), f"the audit of {job.target.unit.name}")
        if self._queue and not usable and (self._revival is None or self._revival.done()):
            self._revival = tasks.background(self._revive(), "asking the failed daemons again")
        self._notify()

    async def _revive(self) -> None:
        """Ask the failed daemons again after each delay; when none comes back, the queued jobs are left."""
        for delay in RETRY_DELAYS:
            await asyncio.sleep(delay)
            if await self.reach():
                self._revival = None
                self._dispatch()
                return
        why = self.why_unusable()
        for lane in self._queue.lanes.values():
            while lane:
                self._end(lane.popleft(), None, why)
        self._notify()

    async def _execute(self, conn: Connection, job: _Job) -> None:
        run, target = job.run, job.target
        job.attempts += 1
        self.answers.prepare(target.root)
        try:
            outcome = await request.attempt(
                conn,
                target,
                priority=run.priority,
                effort=run.effort,
                fresh=run.fresh,
                refute_from=run.refute_from,
                tools=lambda req: self.answers.answer(target.root, req, target.path),
                on_progress=run.progress,
            )
            self._finished(conn, job, outcome)
        except asyncio.CancelledError:
            self.counters.cancelled += 1
            raise
        except request.Transient as exc:
            if exc.code == ErrorCode.BUSY:  # the daemon is up, its queue full: this job waits, then tries again
                self._busy(conn, job, str(exc))
            else:
                self._failed_over(conn, job, conn.failed(exc.code, str(exc)))
        except DaemonUnavailable as exc:  # the connection says it failed: another daemon may take the job
            self._failed_over(conn, job, exc)
        except Exception as exc:  # a failure on this side: the unit fails, saying so, and its run goes on
            log.error("the audit of %s failed on this side", target.unit.name, exc_info=exc)
            why = sanitize.line(f"the audit failed in k3lsp itself ({type(exc).__name__}: {exc}); please report it")
            self._finished(conn, job, Failure(target, ErrorCode.INTERNAL, why))
        finally:
            job.task = None
            conn.running -= 1
            self._dispatch()

    def _finished(self, conn: Connection, job: _Job, outcome: UnitResult | Failure) -> None:
        if isinstance(outcome, UnitResult):
            self.counters.audited_one(outcome)
            self.results.keep(outcome, conn.result_key, job.run.effort, job.run.variant)
        elif outcome.code == ErrorCode.TOO_LONG:
            self.counters.refused += 1
            limit = conn.welcome.max_prompt_tokens if conn.welcome is not None else None
            self.results.refuse(job.target, conn.result_key, limit, outcome.message)
            outcome = UnitResult(job.target, [], DoneStats.of({}), refusal=outcome.message, endpoint=conn.endpoint)
        else:
            self.counters.failed += 1
        self._end(job, outcome)

    def _failed_over(self, conn: Connection, job: _Job, exc: DaemonUnavailable) -> None:
        """The job's daemon failed: the job goes back to the queue, for a daemon that is up (or the revival)."""
        job.run.noted(conn.endpoint, exc, [c.endpoint for c in self.usable()])
        self._again(job, str(exc))

    def _again(self, job: _Job, why: str) -> None:
        """Queue a job for another attempt; left when it has made all of them."""
        if job.attempts >= ATTEMPTS:
            self._end(job, None, why)
            return
        self.counters.retries += 1
        self._queue.put(job)

    def _busy(self, conn: Connection, job: _Job, why: str) -> None:
        """The daemon is up with all the requests it takes from this user open: ask again after a backoff (with
        jitter, so the user's other processes do not all ask at once), for as long as the requests open now can
        take to end (the daemon's deadline), then leave the job with the daemon's reason."""
        now = asyncio.get_running_loop().time()
        job.attempts -= 1  # a busy daemon did not fail: the answer costs no attempt
        job.busy += 1
        if job.busy_since is None:
            job.busy_since = now
        patience = conn.welcome.deadline if conn.welcome is not None and conn.welcome.deadline else BUSY_PATIENCE
        if now - job.busy_since >= patience:
            self._end(job, None, f"{why}; the daemon at {conn.endpoint} stayed busy for {patience:g} s")
            return
        self.counters.retries += 1
        delay = RETRY_DELAYS[min(job.busy, len(RETRY_DELAYS)) - 1] * random.uniform(0.5, 1.5)
        job.waiting = tasks.background(self._wait_then_queue(job, delay), f"the retry of {job.target.unit.name}")

    async def _wait_then_queue(self, job: _Job, delay: float) -> None:
        await asyncio.sleep(delay)
        job.waiting = None
        self._queue.put(job)
        self._dispatch()

    def _end(self, job: _Job, outcome: UnitResult | Failure | None, why: str | None = None) -> None:
        self._jobs.discard(job)
        job.run.ended(job.target, outcome, why)

    # --- explain and status ------------------------------------------------------------------------------

    async def explain(self, target: Target, finding: dict) -> AsyncIterator[str]:
        """The model's explanation of one finding, streamed; on the first usable daemon, or the next when one
        fails before it says a word. Raises DaemonUnavailable or DaemonError."""
        reachable = await self.reach()
        if not reachable:
            raise DaemonUnavailable(ErrorCode.DOWN, self.why_unusable())
        fields = explain_fields(target, finding, self.options.effort(Priority.INTERACTIVE))
        tools = lambda r: self.answers.answer(target.root, r, target.path)  # noqa: E731
        for i, conn in enumerate(reachable):
            said = False
            try:
                async for piece in _explanation(conn, fields, tools):
                    said = True
                    yield piece
                return
            except DaemonUnavailable:
                if said or i == len(reachable) - 1:
                    raise

    async def status(self) -> dict:
        """What is known now: this side's state and counters, each daemon's welcome, and the first connected
        daemon's own status (asked for at most STATUS_WAIT). Nothing here waits for a hello: a daemon that is
        not connected is asked again in the background, and the answer says so."""
        out: dict = {
            "endpoint": self.options.endpoint,
            "state": asdict(self.state),
            "counters": asdict(self.counters),
            "welcome": next((c.welcome.raw for c in self.connections if c.welcome is not None), None),
        }
        if len(self.connections) > 1:
            out["endpoints"] = {c.endpoint: asdict(c.status_line()) for c in self.connections}
        connected = self.usable()
        if not connected:
            for conn in self.connections:
                tasks.background(conn.ensure(), f"the hello to {conn.endpoint}", DaemonUnavailable)
            out["backend"], out["error"] = None, self.why_unusable()
            return sanitize.data(out)
        try:
            out["backend"] = await connected[0].daemon_status(STATUS_WAIT)
        except DaemonError as exc:
            out["backend"], out["error"] = None, str(exc)
        return sanitize.data(out)


def explain_fields(target: Target, finding: dict, effort: str) -> dict:
    unit: Unit = target.unit
    return {
        "path": target.path,
        "unit": unit.name,
        "code": unit.text,
        "context": unit.context,
        "finding": finding,
        "thinking_effort": effort,
    }


async def _explanation(conn: Connection, fields: dict, tools) -> AsyncIterator[str]:
    stream = conn.stream("explain", fields, tools)
    async with contextlib.aclosing(stream) as messages:
        try:
            async for message in _raising(conn, messages):
                yield message
        except DaemonError as exc:
            if request.concerns_daemon(exc.code):
                raise conn.failed(exc.code, str(exc)) from exc
            raise


async def _raising(conn: Connection, messages: AsyncIterator[dict]) -> AsyncIterator[str]:
    """An explanation's text; its errors raised (an explanation is asked for by a person: never retried)."""
    async for message in messages:
        if message["kind"] == "text":
            yield message["text"]
        elif message["kind"] == "error":
            raise DaemonError(message["code"], message["message"])
        elif message["kind"] == "cancelled":  # the daemon's decision, not our task's cancellation
            raise DaemonError(ErrorCode.CANCELLED, "the audit daemon cancelled the explanation")
