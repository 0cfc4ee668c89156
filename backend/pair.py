"""The ranks of `k3-backend serve` under `mlx.launch`: one scheduling step, shared by all ranks in lockstep.

Rank 0 owns the ROUTER and the job table; its scheduler thread takes each turn's Commands and `Link.lead`
exchanges them with every rank (`backend.dist.exchange`: one collective per step), so every rank applies
the same submits, cancels and releases (a cancel is just a command: it works distributed) and calls
`engine.step()` with identical batches and per-request seeds. In the same collective every rank sends the
outcome of its last step (the requests that failed in it, a digest of its state): the scheduler fails on
every rank what failed on one, and a rank whose digest differs is out of lockstep. Followers run the same
Scheduler loop with `Link.follow` as its exchange.

Idle ranks must not spin: a ring collective that waits for a peer busy-polls a core (measured: 2.2 s of
CPU in a 3 s wait), so an idle follower never waits inside one. Whenever the engine is idle before a turn
(the same on every rank: they hold the same state), rank 0 first sends a one-byte wake-up on a plain ZeroMQ
socket and the followers block on that socket, which costs nothing. While the engine is busy every rank
goes straight into the collective, as it computes anyway.

Failures: a request whose step fails is failed on every rank (backend/scheduler.py) and the pair goes on. A
collective with a dead peer raises (ring: "connection to a peer was lost"); a hung peer never
answers, so rank 0's watchdog fails the pair when a turn runs longer than `rank_timeout`. Rank 0 sends a
wake-up and an empty turn every `tick` seconds while idle, so a dead peer is found without a request and
a follower that hears nothing for several ticks knows rank 0 is gone. Either way the process exits
non-zero and the supervisor (`mlx.launch` under launchd/systemd) restarts the pair; see hostfiles/README.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import mlx.core as mx
import zmq

from backend import dist
from backend.engine import Engine, Outcome
from backend.scheduler import Commands, RankFailure, Scheduler

WAKE = b"w"
JOIN_TIMEOUT = 60.0  # seconds rank 0 waits for every follower's wake-up socket


class Link:
    """The wake-up sockets and the commands exchange between rank 0 and the followers."""

    def __init__(self, group: mx.distributed.Group, engine: Engine, tick: float):
        self.group = group
        self.engine = engine
        self.tick = tick
        self.rank = group.rank()
        self._ctx = zmq.Context()
        self._sock: zmq.Socket | None = None
        self._followers: list[bytes] = []
        self.turns = 0  # exchanges of a step
        self.collectives = 0  # all_sums they took
        self.seconds = 0.0  # time spent in them (waiting for the slowest rank included)

    def connect(self) -> None:
        """Rank 0 binds a ROUTER on its own address; each follower connects and says hello (bounded)."""
        endpoint = None
        if self.rank == 0:
            self._sock = self._ctx.socket(zmq.ROUTER)
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.bind(f"tcp://{dist.rank0_host()}:0")
            endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        endpoint = dist.share(endpoint, self.group)
        if self.rank == 0:
            self._followers = [self._recv_hello() for _ in range(self.group.size() - 1)]
            return
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._sock.send(str(self.rank).encode())

    def _recv_hello(self) -> bytes:
        if not self._sock.poll(int(JOIN_TIMEOUT * 1000)):
            raise RankFailure(f"a follower did not connect its wake-up socket within {JOIN_TIMEOUT:g} s")
        route, _ = self._sock.recv_multipart()
        return route

    def lead(self, commands: Commands, outcome: Outcome) -> tuple[Commands, list[Outcome]]:
        """Rank 0's exchange: wake idle followers, then send this turn's commands and its outcome, receive theirs."""
        try:
            if not self.engine.busy():
                for route in self._followers:
                    self._sock.send_multipart([route, WAKE])
            (_, first), *others = self._exchange((commands, outcome))
        except (RuntimeError, zmq.ZMQError) as exc:
            raise RankFailure(f"sharing a step with the other ranks failed: {exc}") from exc
        return commands, [first, *others]

    def follow(self, _none: Commands, outcome: Outcome) -> tuple[Commands, list[Outcome]]:
        """A follower's exchange: when idle wait (without spinning) for rank 0's wake-up, then exchange."""
        try:
            if not self.engine.busy():
                if not self._sock.poll(int(self.tick * 4 * 1000)):
                    raise RankFailure(f"rank 0 sent nothing for {self.tick * 4:g} s")
                self._sock.recv()
            first, *others = self._exchange(outcome)
        except (RuntimeError, zmq.ZMQError) as exc:
            raise RankFailure(f"receiving a step from rank 0 failed: {exc}") from exc
        if not (isinstance(first, tuple) and len(first) == 2 and isinstance(first[0], Commands)):
            raise RankFailure(f"rank 0 sent {type(first).__name__}, not (Commands, Outcome)")
        commands, leader = first
        return commands, [leader, *others]

    def _exchange(self, mine) -> list:
        tic = time.perf_counter()
        shared, collectives = dist.exchange(mine, self.group)
        self.seconds += time.perf_counter() - tic
        self.turns += 1
        self.collectives += collectives
        return shared

    def stats(self) -> dict:
        return {
            "turns": self.turns,
            "collectives": self.collectives,
            "ms_per_turn": round(1000 * self.seconds / self.turns, 3) if self.turns else 0.0,
        }

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
        self._ctx.term()


def watch(scheduler: Scheduler, rank_timeout: float, on_failure: Callable[[str], None]) -> threading.Thread:
    """Rank 0's watchdog: a turn (exchange + step) that runs longer than `rank_timeout` is a hung pair."""

    def run() -> None:
        while True:
            time.sleep(min(1.0, rank_timeout / 4))
            started = scheduler.busy_since
            if started is not None and time.monotonic() - started > rank_timeout:
                on_failure(f"a step did not complete on all ranks within {rank_timeout:g} s")
                return

    thread = threading.Thread(target=run, name="rank-watchdog", daemon=True)
    thread.start()
    return thread
