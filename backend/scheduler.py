"""The engine's own thread, and the asyncio-facing API the daemon and the agent use.

mlx compute blocks for a whole step, so the Engine lives in ONE dedicated thread: the event loop stays free
for pings, cancels and other clients while a batch decodes. The thread sleeps on a condition when there is
nothing to do (no spinning core), and each turn of its loop:

1. takes the commands that arrived since the last step (new requests, cancellations, releases),
2. passes them, with the engine's ``Outcome`` of its last step, through ``exchange`` - the one hook where, on
   the Mac pair, rank 0 shares exactly these commands with every rank and every rank its outcome
   (``backend/pair.py``, one collective), so that all ranks call ``engine.step()`` with the same input,
3. reconciles the outcomes: a request that failed on any rank is failed on every rank, before the step, with
   an error for that request only; a rank whose state digest differs is out of lockstep,
4. applies the commands to the engine and runs one ``engine.step()``,
5. hands the step's events to the event loop with ``call_soon_threadsafe``.

A failure of a request never ends the thread: it finishes with ``error`` and the others go on, on one rank
or many (``engine.step()`` contains its own failures; if it raised anyway, every request it held fails).
Only a broken exchange (a peer died, the link failed) or ranks out of lockstep raise ``RankFailure`` to
``on_failure`` and end the thread; rank 0 then fails every request and exits for a supervisor to restart
the pair (backend/pair.py). A collective failing inside a step (a peer died mid-step) is a broken exchange
too: its requests end with ``rank_failure`` (send again once the pair is back), not ``failed`` (never again).

On a follower rank (``leader=False``) the same loop runs on the main thread with no event loop: it takes
no commands of its own, every turn's commands come from the exchange, and its events are only logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import mlx.core as mx

from backend import dist
from backend.engine import Engine, Finish, GenEvent, GenRequest, Outcome, failed

log = logging.getLogger(__name__)


@dataclass
class Commands:
    """Everything that changes the engine's work before one step; what backend/pair.py shares with all ranks."""

    submits: list[GenRequest] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    releases: list[int] = field(default_factory=list)  # conversations that are over (their continuation cache)
    stop: bool = False

    def __bool__(self) -> bool:
        return bool(self.submits or self.cancels or self.releases or self.stop)


# (rank 0's commands or nothing, this rank's outcome) -> (the commands every rank runs, every rank's outcome)
Exchange = Callable[[Commands, Outcome], tuple[Commands, list[Outcome]]]


class Laps:
    """Seconds spent in each named part of a repeated loop: ``lap(name)`` charges the time since the last lap."""

    def __init__(self, names: tuple[str, ...]):
        self._seconds: Counter = Counter(dict.fromkeys(names, 0.0))  # every key from the start: read from another
        self._mark = time.perf_counter()  # thread, the dict never changes size

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self._seconds[name] += now - self._mark
        self._mark = now

    def totals(self) -> dict[str, float]:
        return {name: round(seconds, 4) for name, seconds in self._seconds.items()}


class RankFailure(RuntimeError):
    """The ranks cannot go on in lockstep: a peer died, the link failed or timed out, or their states differ."""


def local_exchange(commands: Commands, outcome: Outcome) -> tuple[Commands, list[Outcome]]:
    """One rank: the commands rank 0 collected are the commands every rank runs."""
    return commands, [outcome]


class Scheduler:
    """Owns the Engine in one thread; ``stream(req)`` yields its GenEvents on the event loop."""

    def __init__(
        self,
        engine: Engine,
        exchange: Exchange = local_exchange,
        *,
        leader: bool = True,
        tick: float | None = None,
        on_failure: Callable[[str], None] | None = None,
    ):
        """``tick``: when idle, run an empty turn this often (rank 0 of a pair: a dead peer is found while idle)."""
        self.engine = engine
        self._exchange = exchange
        self._leader = leader
        self._tick = tick
        self._on_failure = on_failure
        self.busy_since: float | None = None  # monotonic start of the running turn (the pair's watchdog reads it)
        self._cond = threading.Condition()
        self._pending = Commands()
        self._queues: dict[int, asyncio.Queue[GenEvent]] = {}
        self._rids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self._snapshot: dict = {}  # published by the thread after every step; read by status
        self._steps = 0
        self.turns = 0  # turns completed (each with its exchange on a pair): `turn_now` callers watch it
        self._poked = False
        self._started = time.monotonic()
        self._batch_peak = 0
        # seconds per part of a turn, for status (docs/engine.md: the step profile)
        self._clock = Laps(("wait", "exchange", "step", "publish", "post"))

    # --- event-loop side ---------------------------------------------------------------------------------

    def turn_now(self) -> None:
        """Take a turn now, even with nothing to do: on a pair its exchange finds a dead peer at once (a stop
        signal from ``mlx.launch`` usually means one died), instead of at the next tick."""
        with self._cond:
            self._poked = True
            self._cond.notify()

    def start(self) -> None:
        """Start the engine thread; events are delivered on the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._started = time.monotonic()
        self.thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.thread.start()

    async def close(self) -> None:
        """Stop the thread after its current step; requests still open end with ``cancelled``."""
        with self._cond:
            self._pending.stop = True
            self._cond.notify()
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join, 30)

    def follow(self) -> None:
        """Run the loop on this thread until a stop command or a RankFailure (a follower rank's whole life)."""
        self._run()

    def new_rid(self) -> int:
        return next(self._rids)

    def submit(self, req: GenRequest) -> asyncio.Queue[GenEvent]:
        """Queue a request for the next step; its events (the last one has ``finish``) arrive on the queue."""
        if req.rid in self._queues:
            raise ValueError(f"request {req.rid} is already in the scheduler")
        queue: asyncio.Queue[GenEvent] = asyncio.Queue()
        self._queues[req.rid] = queue
        with self._cond:
            self._pending.submits.append(req)
            self._cond.notify()
        return queue

    def cancel(self, rid: int) -> None:
        """Ask the engine to finish ``rid`` with ``cancelled`` at its next step (freeing its batch slot)."""
        if rid not in self._queues:
            return
        with self._cond:
            self._pending.cancels.append(rid)
            self._cond.notify()

    def release(self, rid: int) -> None:
        """The conversation whose last generation was ``rid`` is over: the engine may drop its continuation."""
        with self._cond:
            self._pending.releases.append(rid)

    async def stream(self, req: GenRequest) -> AsyncIterator[GenEvent]:
        """Submit ``req`` and yield its events up to and including the finishing one.

        If the consumer stops early (its task is cancelled, or it breaks out), the request is cancelled in
        the engine, so an abandoned generation never keeps a batch slot.
        """
        queue = self.submit(req)
        finished = False
        try:
            while True:
                event = await queue.get()
                finished = event.finish is not None
                yield event
                if finished:
                    return
        finally:
            if not finished:
                self.cancel(req.rid)

    def stats(self) -> dict:
        """Scheduler and engine counters as of the last step (cheap; never touches the engine)."""
        snap = dict(self._snapshot)
        elapsed = max(time.monotonic() - self._started, 1e-9)
        with self._cond:
            waiting = len(self._pending.submits)
        snap.update(
            steps=self._steps,
            steps_per_s=round(self._steps / elapsed, 2),
            waiting=waiting,
            batch_peak=self._batch_peak,
            turn_seconds=self._clock.totals(),
        )
        link = getattr(self._exchange, "__self__", None)
        if hasattr(link, "stats"):
            snap["link"] = link.stats()
        return snap

    def _deliver(self, events: list[GenEvent]) -> None:
        for event in events:
            queue = self._queues.get(event.rid)
            if queue is None:  # a late event for a request already failed by the scheduler
                continue
            queue.put_nowait(event)
            if event.finish is not None:
                del self._queues[event.rid]

    # --- engine thread -----------------------------------------------------------------------------------

    def _take(self) -> Commands:
        """Wait until there is work (or a tick passed), then take the pending commands; a follower takes none."""
        if not self._leader:
            return Commands()
        with self._cond:
            if not self._pending and not self.engine.busy():
                self._cond.wait_for(lambda: self._pending or self.engine.busy() or self._poked, self._tick)
            commands, self._pending, self._poked = self._pending, Commands(), False
        return commands

    def _run(self) -> None:
        in_flight: set[int] = set()
        try:
            while True:
                try:
                    if self._turn(in_flight):
                        return
                except Exception as exc:  # a bug here must not leave requests waiting forever
                    if not isinstance(exc, RankFailure) and self.engine.ranks == 1:
                        log.exception("scheduler turn failed")
                        for rid in in_flight:  # free their batch slots too, not only their waiters
                            self._guard(self.engine.cancel, rid)
                        self._post(self._finish_all(in_flight, "error", f"scheduler error: {exc}"[:500]))
                        continue
                    # Several ranks: this rank cannot know whether the others took the same turn.
                    log.error("rank failure: %s", exc, exc_info=not isinstance(exc, RankFailure))
                    if self._on_failure is None:
                        self._post(self._finish_all(in_flight, "error", f"rank failure: {exc}"[:500]))
                    else:  # the daemon fails every request with error rank_failure and exits
                        self._on_failure(str(exc))
                    return
        finally:
            # mlx needs every thread that ran computations to destroy its streams before it ends, or the
            # process may abort at exit ("terminate called without an active exception"; ml-explore/mlx#4327).
            mx.clear_streams()

    def _turn(self, in_flight: set[int]) -> bool:
        """One turn: take and exchange commands and outcomes, reconcile, apply, step; True when told to stop."""
        clock = self._clock
        commands = self._take()
        clock.lap("wait")
        self.busy_since = time.monotonic()
        try:
            commands, outcomes = self._exchange(commands, self.engine.outcome())
            self._reconcile(outcomes)
            events = self._apply(commands, in_flight)
            clock.lap("exchange")
            if commands.stop:
                self._post(events + self._drain(in_flight))
                return True
            if self.engine.busy():
                events += self._step(in_flight)
                clock.lap("step")
                self._publish()
                clock.lap("publish")
        finally:
            self.turns += 1  # before busy_since is cleared: see serve._stop_after_a_turn
            self.busy_since = None
        self._post(events)
        clock.lap("post")
        return False

    def _reconcile(self, outcomes: list[Outcome]) -> None:
        """Every rank's last step must have started from the same state; what failed on one rank fails on all.

        A request that failed on every rank (a deterministic failure) leaves the ranks as alike as before. One
        that failed on some ranks only may have left a prompt cache behind on the others (it finished there),
        so then every rank forgets its prompt cache, and they are alike again.
        """
        digests = {o.digest for o in outcomes}
        if len(digests) > 1:
            raise RankFailure(f"the ranks are out of lockstep: their states differ ({', '.join(sorted(digests))})")
        failed: dict[int, str] = {}
        for rank, outcome in enumerate(outcomes):
            for rid, why in outcome.failed.items():
                failed.setdefault(rid, why if len(outcomes) == 1 else f"on rank {rank}: {why}")
        if any(outcome.failed.keys() != failed.keys() for outcome in outcomes):
            log.warning("requests %s failed on some ranks only: every rank drops its prompt cache", sorted(failed))
            self.engine.clear_prompt_cache()
        for rid, why in failed.items():
            self.engine.fail(rid, why)

    def _apply(self, commands: Commands, in_flight: set[int]) -> list[GenEvent]:
        events = []
        cancels = set(commands.cancels)
        for req in commands.submits:
            if req.rid in cancels:  # cancelled before the engine saw it: nothing to free
                cancels.discard(req.rid)
                events.append(GenEvent(req.rid, "", finish=Finish.CANCELLED, stats={}))
                continue
            try:
                self.engine.submit(req)
                in_flight.add(req.rid)
            except Exception as exc:
                log.exception("engine refused request %s", req.rid)
                events.append(GenEvent(req.rid, "", Finish.ERROR, {}, error=failed(None, str(exc)[:500])))
        for rid in cancels:
            if rid in in_flight:
                self._guard(self.engine.cancel, rid)
        for rid in commands.releases:
            self._guard(self.engine.release, rid)
        return events

    def _step(self, in_flight: set[int]) -> list[GenEvent]:
        try:
            events = self.engine.step()
        except Exception as exc:
            # step() contains per-request failures itself; if it raised anyway, which request broke it is
            # unknown: every request of this step fails, on this rank now and, through outcome(), on the others.
            # Unless a collective of the step failed (a peer died mid-step): the link is unusable (the next
            # exchange would block), so that is a rank failure.
            if self.engine.ranks > 1 and dist.link_error(exc):
                raise RankFailure(f"engine step failed: {type(exc).__name__}: {exc}"[:500]) from exc
            log.exception("engine step failed; failing %d requests", len(in_flight))
            events = self.engine.abandon(f"engine step failed: {type(exc).__name__}: {exc}"[:500])
        self._steps += 1
        for event in events:
            if event.finish is not None:
                in_flight.discard(event.rid)
        return events

    def _drain(self, in_flight: set[int], max_steps: int = 100) -> list[GenEvent]:
        """Cancel everything in the engine and step until it is idle, so no computation is left running
        when the process exits (mlx aborts at exit if a batch is abandoned mid-evaluation)."""
        for rid in in_flight:
            self._guard(self.engine.cancel, rid)
        events = []
        for _ in range(max_steps):
            if not self.engine.busy():
                break
            events += self._step(in_flight)
        self._publish()
        return events + self._finish_all(in_flight, "cancelled")

    def _finish_all(self, in_flight: set[int], reason: str, error: str | None = None) -> list[GenEvent]:
        events = [GenEvent(rid, "", Finish(reason), {}, error=failed(None, error)) for rid in sorted(in_flight)]
        in_flight.clear()
        return events

    def _publish(self) -> None:
        try:
            snap = dict(self.engine.stats())
        except Exception:
            log.exception("engine stats failed")
            return
        self._batch_peak = max(self._batch_peak, int(snap.get("active", 0)))
        self._snapshot = snap

    def _post(self, events: list[GenEvent]) -> None:
        if self._loop is None:  # a follower rank: nobody waits for the events; say how requests ended
            for event in events:
                if event.finish is not None:
                    log.info("request %s finished: %s", event.rid, event.finish)
            return
        if events and self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed after the check (shutdown)
                self._loop.call_soon_threadsafe(self._deliver, events)

    @staticmethod
    def _guard(fn: Callable[[int], None], rid: int) -> None:
        try:
            fn(rid)
        except Exception:
            log.exception("engine call failed for request %s", rid)
