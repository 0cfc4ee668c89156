"""Fair admission of requests to the engine: interactive first, then round-robin between client identities.

A team shares one Mac pair. Left first-come-first-served, one person's workspace audit (hundreds of units,
as many open requests as their cap allows) would fill the engine's queue, and a colleague's five units would
wait behind all of it. So a generation enters the engine only through a slot here. There are as many slots
as the engine decodes at once (``--max-concurrency``), and background requests leave the engine's
interactive reserve free, as its own admission does (docs/engine.md). When a slot frees, it goes to a
waiting interactive request before any background one; among the identities waiting at that priority, to
the one with the fewest slots now, and among equals to the one served least recently. Someone who arrives
while another holds every slot thus gets each slot that frees until both hold as many: no one takes more
than their share while others wait, and an idle pair is still all one person's.

Any client may say ``priority: interactive``, so the priority is counted per identity: an identity holds at
most one slot at the interactive level. While it does, its other interactive requests wait like background
ones: they take no reserved slot and go before nobody else's background work, only before its own (a save
that changed three functions still comes before the same person's workspace audit). One identity flooding
interactive requests therefore holds one reserved slot at most and cannot starve anyone's work.

The identity is the User-Id the gate gave the connection (backend/gate.py: the CurveZMQ key, ``uid:N``, or
``addr:IP``): more connections do not buy more share. A slot is held for one generation of a request's
audit loop: a request waiting for its editor's tool results holds none (a slow or silent editor cannot
park the engine's capacity), and a request answered from the result store never takes one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator

from k3lsp.wire.protocol import Priority

INTERACTIVE, BACKGROUND = Priority.INTERACTIVE.rank, Priority.BACKGROUND.rank  # the levels slots are held at


class FairShare:
    """The engine's admission slots; used from the daemon's event loop only."""

    def __init__(self, slots: int, interactive_reserve: int = 1):
        """``slots``: requests the engine runs at once; ``interactive_reserve``: of those, how many background
        requests leave free (but they always get one), as the engine's own admission does."""
        self.slots = max(1, slots)
        self.background_slots = max(1, self.slots - interactive_reserve)
        self._holding: Counter[str] = Counter()  # identity -> slots held
        self._interactive: Counter[str] = Counter()  # identity -> slots held at the interactive level (0 or 1)
        self._levels: Counter[int] = Counter()  # level -> slots held
        # priority -> identity -> its waiting requests, oldest first; identity order = least recently served first
        self._waiting: dict[int, OrderedDict[str, deque[asyncio.Future]]] = {
            INTERACTIVE: OrderedDict(),
            BACKGROUND: OrderedDict(),
        }

    @contextlib.asynccontextmanager
    async def slot(self, identity: str, priority: Priority) -> AsyncIterator[None]:
        """Hold one engine slot for the block, waiting for a fair turn when all are taken."""
        wanted = priority.rank
        turn = asyncio.get_running_loop().create_future()
        self._waiting[wanted].setdefault(identity, deque()).append(turn)
        while self._grant():  # a free slot goes to the fairest turn, which may be this one
            pass
        try:
            level = await turn  # the level it was granted at: its own, or background for a second interactive
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given a slot just as it was cancelled: hand it on
                self._release(identity, turn.result())
            else:
                self._forget(wanted, identity, turn)
            raise
        try:
            yield
        finally:
            self._release(identity, level)

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

    def _free(self, level: int) -> bool:
        total = self._levels.total()
        return total < self.slots and (level == INTERACTIVE or self._levels[BACKGROUND] < self.background_slots)

    def _take(self, identity: str, level: int) -> None:
        self._holding[identity] += 1
        self._interactive[identity] += level == INTERACTIVE
        self._levels[level] += 1

    def _release(self, identity: str, level: int) -> None:
        self._holding[identity] -= 1
        self._interactive[identity] -= level == INTERACTIVE
        self._levels[level] -= 1
        if self._holding[identity] <= 0:
            del self._holding[identity]
        if self._interactive[identity] <= 0:
            del self._interactive[identity]
        while self._grant():
            pass

    def _grant(self) -> bool:
        """Give one free slot to the next fair turn; False when nobody waits or no slot is free for them.

        First an interactive turn of an identity that holds no interactive slot; then, at the background
        level, whoever holds fewest of those waiting at all, its interactive turns before its background ones.
        """
        interactive, background = self._waiting[INTERACTIVE], self._waiting[BACKGROUND]
        if self._free(INTERACTIVE):
            eligible = [who for who in interactive if not self._interactive[who]]
            if eligible:
                self._give(min(eligible, key=lambda who: self._holding[who]), INTERACTIVE, INTERACTIVE)
                return True
        if self._free(BACKGROUND):
            waiting = [*background, *(who for who in interactive if who not in background)]
            if waiting:
                identity = min(waiting, key=lambda who: self._holding[who])  # ties: the least recently served
                self._give(identity, INTERACTIVE if identity in interactive else BACKGROUND, BACKGROUND)
                return True
        return False

    def _give(self, identity: str, queue: int, level: int) -> None:
        """Grant the oldest turn of ``identity`` waiting in ``queue`` a slot at ``level``."""
        queues = self._waiting[queue]
        turns = queues.pop(identity)
        turns.popleft().set_result(level)
        if turns:
            queues[identity] = turns  # back at the end of the round
        if queue != level and identity in self._waiting[level]:  # served: last in the round of that level too
            self._waiting[level].move_to_end(identity)
        self._take(identity, level)

    def _forget(self, level: int, identity: str, turn: asyncio.Future) -> None:
        turns = self._waiting[level].get(identity)
        if turns is None:
            return
        with contextlib.suppress(ValueError):
            turns.remove(turn)
        if not turns:
            del self._waiting[level][identity]
