"""The scheduler's lockstep hooks on the real tiny engine in one process: what rank 0 and a follower do
with the exchange (liveness ticks, a follower driven only by received commands, a RankFailure)."""

import asyncio
import itertools
import logging
import threading
import time

import pytest

from backend.engine import Engine, EngineArgs, GenRequest, Outcome
from backend.scheduler import Commands, RankFailure, Scheduler
from tests.support.engine import drain
from tests.support.forcing import Forced


@pytest.fixture(scope="module")
def engine(tiny_model):
    engine = Engine(EngineArgs(model=str(tiny_model), max_concurrency=4, trust_remote_code=True), hooks=Forced())
    engine.warmup()
    return engine


async def _posted_events_delivered() -> None:
    """Return once every event the scheduler's thread posted so far has reached its queue: the loop runs
    callbacks posted with call_soon_threadsafe in order, so a marker posted now runs after them."""
    loop = asyncio.get_running_loop()
    marker = asyncio.Event()
    loop.call_soon_threadsafe(marker.set)
    await marker.wait()


def request(engine: Engine, rid: int, forced: list[int]) -> GenRequest:
    prompt = list(engine.tokenizer.encode("int f(int n) { return n; }"))
    return engine.hooks.request(
        rid=rid, prompt=prompt, segments=[], max_tokens=20, temp=1.0, top_p=0.95, seed=rid, forced=forced
    )


async def test_idle_leader_runs_an_empty_turn_every_tick(engine):
    seen: list[Commands] = []
    times: list[float] = []
    five = threading.Event()

    def exchange(commands: Commands, outcome: Outcome):
        seen.append(commands)
        times.append(time.monotonic())
        if len(seen) >= 5:
            five.set()
        return commands, [outcome]

    sched = Scheduler(engine, exchange, tick=0.1)
    sched.start()
    try:
        assert await asyncio.to_thread(five.wait, 30), f"{len(seen)} turns in 30 s"
    finally:
        await sched.close()
    idle = seen[:-1]  # the last one is the stop
    assert len(idle) >= 5 and not any(idle)
    gaps = [b - a for a, b in itertools.pairwise(times[:5])]
    assert min(gaps) >= 0.09, gaps  # one turn per tick when idle, not a busy loop
    assert seen[-1].stop


def test_follower_runs_the_commands_it_receives_until_stop(engine, caplog):
    """No commands of its own: every turn's come from the exchange, like rank 1 receiving rank 0's steps."""
    feed = [
        Commands(submits=[request(engine, 1, [100, 101]), request(engine, 2, [102] * 15)]),
        Commands(),
        Commands(cancels=[2]),
    ]

    def exchange(own: Commands, outcome: Outcome):
        assert not own  # a follower never has commands of its own
        return (feed.pop(0) if feed else (Commands() if engine.busy() else Commands(stop=True))), [outcome]

    with caplog.at_level(logging.INFO, logger="backend.scheduler"):
        thread = threading.Thread(target=Scheduler(engine, exchange, leader=False).follow)
        thread.start()
        thread.join(120)
    assert not thread.is_alive()
    finishes = sorted(r.getMessage() for r in caplog.records if "finished" in r.getMessage())
    assert finishes == ["request 1 finished: stop", "request 2 finished: cancelled"]


async def test_rank_failure_ends_the_thread_and_reports_once(engine):
    failures: list[str] = []
    turns = [0]

    def exchange(commands: Commands, outcome: Outcome):
        turns[0] += 1
        if turns[0] == 3:
            raise RankFailure("connection to a peer was lost")
        return commands, [outcome]

    sched = Scheduler(engine, exchange, tick=0.05, on_failure=failures.append)
    sched.start()
    req = request(engine, sched.new_rid(), [100] * 15)
    queue = sched.submit(req)
    await asyncio.to_thread(sched.thread.join, 60)
    assert not sched.thread.is_alive()
    assert failures == ["connection to a peer was lost"]
    await _posted_events_delivered()
    events = [queue.get_nowait() for _ in range(queue.qsize())]
    assert all(e.finish is None for e in events)  # no finish from the scheduler: the daemon ends the requests
    assert sched.busy_since is None
    engine.cancel(req.rid)  # leave the shared engine idle
    drain(engine)
