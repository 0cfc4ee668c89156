"""A counting semaphore that wakes interactive waiters before background ones.

The daemon schedules interactive requests first, but only among the requests it has been sent: if a
workspace audit had already filled every client-side slot, the focused file's units would queue behind
it here. So the client hands out its slots by priority too, FIFO within a priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Callable

RANK = {"interactive": 0, "background": 1}


class PrioritySlots:
    """At most ``limit`` holders at a time; free slots go to the best-ranked, oldest waiter."""

    def __init__(self, limit: int, on_change: Callable[[], None] | None = None):
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.on_change = on_change or (lambda: None)  # queued or running changed (status displays)
        self.running = 0
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()

    @property
    def queued(self) -> int:
        return sum(1 for *_, f in self._waiters if not f.done())

    @contextlib.asynccontextmanager
    async def hold(self, priority: str = "interactive") -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self.running -= 1
            self._wake()
            self.on_change()

    async def _acquire(self, priority: str) -> None:
        if self.running < self.limit and not self.queued:
            self.running += 1
            self.on_change()
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (RANK[priority], next(self._seq), future))
        self.on_change()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted just as we were cancelled: pass it on
                self.running -= 1
                self._wake()
            self.on_change()
            raise
        self.on_change()

    def _wake(self) -> None:
        while self._waiters and self.running < self.limit:
            *_, future = heapq.heappop(self._waiters)
            if not future.done():
                self.running += 1
                future.set_result(None)
