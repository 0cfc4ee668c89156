"""The scheduler around a real Engine on the tiny checkpoint, in this process (no sockets)."""

import asyncio
from pathlib import Path

import pytest

from backend.engine import Engine, EngineArgs, GenRequest, Outcome
from backend.scheduler import Commands, Scheduler, local_exchange
from tests.support.forcing import Forced


@pytest.fixture(scope="module")
def engine(tiny_model):
    engine = Engine(EngineArgs(model=str(tiny_model), max_concurrency=4, trust_remote_code=True), hooks=Forced())
    engine.warmup()
    return engine


class FailingOnce(Engine):
    """The real engine, except that its next step() raises (a fault step() did not contain itself)."""

    fail_next = False
    error = "injected step failure"

    def step(self):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError(self.error)
        return super().step()


def request(sched: Scheduler, engine: Engine, n: int = 8, forced: list[int] | None = None) -> GenRequest:
    prompt = list(engine.tokenizer.encode("int f(int n) { return n; }"))
    return engine.hooks.request(
        rid=sched.new_rid(), prompt=prompt, segments=[], max_tokens=n, temp=1.0, top_p=0.95, seed=7, forced=forced
    )


async def collect(sched: Scheduler, req: GenRequest):
    return [ev async for ev in sched.stream(req)]


async def test_streams_end_in_one_finish_and_run_together(engine):
    sched = Scheduler(engine)
    sched.start()
    try:
        reqs = [request(sched, engine, 6, forced=[100 + i] * 3) for i in range(3)]
        results = await asyncio.wait_for(asyncio.gather(*(collect(sched, r) for r in reqs)), 120)
        for evs in results:
            assert [ev.finish for ev in evs].count(None) == len(evs) - 1 and evs[-1].finish == "stop"
            assert evs[-1].stats["generated_tokens"] == 4  # 3 forced + eos
        assert max(evs[-1].stats["batch_size_peak"] for evs in results) > 1
    finally:
        await sched.close()


async def test_turns_are_timed_by_part(engine):
    """turn_seconds (status): the step holds the turn's time; waiting for work is counted apart from it."""
    sched = Scheduler(engine)
    sched.start()
    try:
        await asyncio.wait_for(collect(sched, request(sched, engine, 6, forced=[101] * 5)), 120)
        await asyncio.sleep(0.2)  # idle: the thread waits for work
        await asyncio.wait_for(collect(sched, request(sched, engine, 2)), 120)
        turns = sched.stats()["turn_seconds"]
        assert set(turns) == {"wait", "exchange", "step", "publish", "post"}
        assert turns["step"] > 0 and turns["wait"] >= 0.2
    finally:
        await sched.close()


def cpu_ticks(native_id: int) -> int:
    """User + system CPU time of one thread of this process, in clock ticks (Linux /proc)."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def test_idle_thread_does_not_spin(engine):
    sched = Scheduler(engine)
    sched.start()
    try:
        await asyncio.wait_for(collect(sched, request(sched, engine, 4)), 120)
        steps, ticks = sched.stats()["steps"], cpu_ticks(sched.thread.native_id)
        await asyncio.sleep(0.5)
        assert sched.stats()["steps"] == steps
        assert cpu_ticks(sched.thread.native_id) - ticks <= 2  # waiting on its condition (a spin would be ~50)
    finally:
        await sched.close()


async def test_abandoned_stream_cancels_in_the_engine(engine):
    sched = Scheduler(engine)
    sched.start()
    try:
        before = engine.stats()["finish"]["cancelled"]
        req = request(sched, engine, 2000, forced=list(range(100, 400)))
        async for ev in sched.stream(req):
            if ev.text:
                break  # abandons the stream mid-generation
        for _ in range(200):
            if engine.stats()["finish"]["cancelled"] == before + 1 and not engine.busy():
                break
            await asyncio.sleep(0.05)
        assert engine.stats()["finish"]["cancelled"] == before + 1 and engine.stats()["active"] == 0
    finally:
        await sched.close()


@pytest.mark.parametrize("ranks", [1, 2])
async def test_engine_exception_fails_the_requests_and_the_thread_goes_on(tiny_model, ranks):
    """On a pair too: the failure is a request's, not the pair's (the other rank learns it from the outcome)."""
    engine = FailingOnce(EngineArgs(model=str(tiny_model), trust_remote_code=True), hooks=Forced())
    engine.ranks = ranks
    failures: list[str] = []
    sched = Scheduler(engine, PeerRank() if ranks == 2 else local_exchange, on_failure=failures.append)
    sched.start()
    try:
        engine.fail_next = True
        evs = await asyncio.wait_for(collect(sched, request(sched, engine, 8)), 120)
        assert evs[-1].finish == "error" and "injected" in evs[-1].error.message
        evs = await asyncio.wait_for(collect(sched, request(sched, engine, 3)), 120)
        assert evs[-1].finish in ("stop", "length", "loop") and failures == []
    finally:
        await sched.close()


async def test_a_collective_failing_inside_a_step_is_a_rank_failure(tiny_model):
    """A peer that dies mid-step makes the step's own collective fail first (before the next exchange): that
    is the pair's failure (the daemon answers rank_failure and exits), not the request's."""
    engine = FailingOnce(EngineArgs(model=str(tiny_model), trust_remote_code=True), hooks=Forced())
    engine.ranks, engine.error = 2, "[ring] connection to a peer was lost"
    failures: list[str] = []
    sched = Scheduler(engine, PeerRank(), on_failure=failures.append)
    sched.start()
    engine.fail_next = True
    sched.submit(request(sched, engine, 8))
    await asyncio.to_thread(sched.thread.join, 120)
    assert not sched.thread.is_alive() and len(failures) == 1 and "connection to a peer was lost" in failures[0]


async def test_close_cancels_what_is_running_and_exchange_sees_every_command(engine):
    seen: list[Commands] = []

    def exchange(commands: Commands, outcome: Outcome):  # what backend/pair.py shares with the other ranks
        seen.append(commands)
        return commands, [outcome]

    sched = Scheduler(engine, exchange)
    sched.start()
    req = request(sched, engine, 2000, forced=list(range(100, 400)))
    stream = sched.stream(req)
    first = await asyncio.wait_for(anext(stream), 120)
    assert first.finish is None
    await sched.close()
    rest = [ev async for ev in stream]
    assert rest[-1].finish == "cancelled" and not engine.busy()
    assert [r.rid for c in seen for r in c.submits] == [req.rid] and seen[-1].stop


class BreakingExchange:
    """An exchange that raises a non-RuntimeError once armed, like an UnpicklingError from a bad broadcast."""

    def __init__(self):
        self.armed = False

    def __call__(self, commands: Commands, outcome: Outcome):
        if self.armed:
            self.armed = False
            raise ValueError("injected exchange failure")
        return commands, [outcome]


async def test_a_failed_turn_on_one_rank_also_cancels_the_requests_in_the_engine(tiny_model):
    engine = Engine(EngineArgs(model=str(tiny_model), trust_remote_code=True), hooks=Forced())
    exchange = BreakingExchange()
    sched = Scheduler(engine, exchange)
    sched.start()
    try:
        stream = sched.stream(request(sched, engine, 2000, forced=list(range(100, 400))))
        assert (await asyncio.wait_for(anext(stream), 120)).finish is None
        exchange.armed = True
        rest = await asyncio.wait_for(collect_rest(stream), 120)
        assert rest[-1].finish == "error" and "injected" in rest[-1].error.message
        for _ in range(200):  # the engine frees the slot at its next step, which the next request causes
            if not engine.busy():
                break
            await asyncio.sleep(0.05)
        assert not engine.busy() and engine.stats()["finish"]["cancelled"] == 1
    finally:
        await sched.close()


async def collect_rest(stream):
    return [ev async for ev in stream]


class PeerRank:
    """The exchange of a pair seen from rank 0, with rank 1 simulated: its outcome is rank 0's, except for what
    the test makes it report (a request that failed there, a different state digest)."""

    def __init__(self):
        self.fail_on_peer: int | None = None
        self.diverge = False

    def __call__(self, commands: Commands, outcome: Outcome):
        peer = Outcome(dict(outcome.failed), outcome.digest)
        if self.fail_on_peer is not None:
            peer.failed[self.fail_on_peer] = "prefill failed: MemoryError: out of memory"
            self.fail_on_peer = None
        if self.diverge:
            peer.digest = "0000000000000000"
        return commands, [outcome, peer]


async def test_a_request_failed_on_another_rank_fails_here_alone_and_the_others_go_on(tiny_model):
    engine = Engine(EngineArgs(model=str(tiny_model), trust_remote_code=True), hooks=Forced())
    engine.ranks = 2
    peer = PeerRank()
    failures: list[str] = []
    sched = Scheduler(engine, peer, on_failure=failures.append)
    sched.start()
    try:
        victim = request(sched, engine, 2000, forced=list(range(100, 400)))
        other = request(sched, engine, 60, forced=list(range(200, 240)))
        victim_stream, other_task = sched.stream(victim), asyncio.ensure_future(collect(sched, other))
        assert (await asyncio.wait_for(anext(victim_stream), 120)).finish is None
        peer.fail_on_peer = victim.rid
        rest = await asyncio.wait_for(collect_rest(victim_stream), 120)
        assert rest[-1].finish == "error" and rest[-1].error.code == "failed"
        assert rest[-1].error.message == "on rank 1: prefill failed: MemoryError: out of memory"
        assert (await asyncio.wait_for(other_task, 120))[-1].finish == "stop"
        assert failures == [] and sched.thread.is_alive()
    finally:
        await sched.close()


@pytest.mark.parametrize(
    ("make", "flag", "why"), [(BreakingExchange, "armed", "injected"), (PeerRank, "diverge", "out of lockstep")]
)
async def test_a_failed_exchange_or_ranks_out_of_lockstep_end_the_pair(tiny_model, make, flag, why):
    engine = Engine(EngineArgs(model=str(tiny_model), trust_remote_code=True), hooks=Forced())
    engine.ranks = 2  # as on a pair: the other rank may not have failed the same way
    exchange = make()
    failures: list[str] = []
    sched = Scheduler(engine, exchange, on_failure=failures.append)
    sched.start()
    try:
        setattr(exchange, flag, True)
        sched.submit(request(sched, engine, 4))
        await asyncio.wait_for(asyncio.to_thread(sched.thread.join, 60), 90)
        assert not sched.thread.is_alive() and len(failures) == 1 and why in failures[0]
    finally:
        await sched.close()
