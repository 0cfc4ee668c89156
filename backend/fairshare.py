"""Fair admission of requests to the engine: interactive first, then round-robin between client identities.

A team shares one Mac pair. Left first-come-first-served, one person's workspace audit (hundreds of units,
as many open requests as their cap allows) would fill the engine's queue, and a colleague's five units would
wait behind all of it. So a request enters the engine only through a slot here, and there are as many slots
as the engine decodes at once (``--max-concurrency``). When a slot frees, it goes to a waiting interactive
request before any background one; among the identities waiting at that priority, to the one with the fewest
slots now, and among equals to the one served least recently. Someone who arrives while another holds every
slot thus gets each slot that frees until both hold as many: no one takes more than their share while
others wait, and an idle pair is still all one person's.

The identity is the User-Id the gate gave the connection (backend/gate.py: the CurveZMQ key, ``uid:N``, or
``addr:IP``): more connections do not buy more share. A request holds its slot from the start of its audit
loop to its end (its tool rounds included; a request answered from the result store needs none).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator

INTERACTIVE, BACKGROUND = 0, 1


class FairShare:
    """The engine's admission slots; used from the daemon's event loop only."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self._holding: Counter[str] = Counter()  # identity -> slots held
        # priority -> identity -> its waiting requests, oldest first; identity order = least recently served first
        self._waiting: dict[int, OrderedDict[str, deque[asyncio.Future]]] = {INTERACTIVE: OrderedDict(),
                                                                             BACKGROUND: OrderedDict()}

    @contextlib.asynccontextmanager
    async def slot(self, identity: str, priority: int) -> AsyncIterator[None]:
        """Hold one engine slot for the block, waiting for a fair turn when all are taken."""
        level = INTERACTIVE if priority <= INTERACTIVE else BACKGROUND
        if self._free() and not any(self._waiting.values()):
            self._holding[identity] += 1
        else:
            turn = asyncio.get_running_loop().create_future()
            self._waiting[level].setdefault(identity, deque()).append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # given a slot just as it was cancelled: hand it on
                    self._release(identity)
                else:
                    self._forget(level, identity, turn)
                raise
        try:
            yield
        finally:
            self._release(identity)

    def depths(self) -> dict[str, dict[str, int]]:
        """Per identity: requests waiting for a slot and slots held (for ``status``)."""
        out: dict[str, dict[str, int]] = {}
        for identity, held in self._holding.items():
            if held:
                out.setdefault(identity, {"waiting": 0, "running": 0})["running"] = held
        for queues in self._waiting.values():
            for identity, waiting in queues.items():
                out.setdefault(identity, {"waiting": 0, "running": 0})["waiting"] += len(waiting)
        return out

    def _free(self) -> bool:
        return sum(self._holding.values()) < self.slots

    def _release(self, identity: str) -> None:
        self._holding[identity] -= 1
        if self._holding[identity] <= 0:
            del self._holding[identity]
        while self._free() and self._grant():
            pass

    def _grant(self) -> bool:
        """Give one free slot to the next fair turn; False when nobody waits."""
        for level in (INTERACTIVE, BACKGROUND):
            queues = self._waiting[level]
            if not queues:
                continue
            identity = min(queues, key=lambda who: self._holding[who])  # ties: the first, least recently served
            turns = queues.pop(identity)
            turns.popleft().set_result(None)
            if turns:
                queues[identity] = turns  # back at the end of the round
            self._holding[identity] += 1
            return True
        return False

    def _forget(self, level: int, identity: str, turn: asyncio.Future) -> None:
        turns = self._waiting[level].get(identity)
        if turns is None:
            return
        with contextlib.suppress(ValueError):
            turns.remove(turn)
        if not turns:
            del self._waiting[level][identity]
