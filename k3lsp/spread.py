"""One queue of audit work spread over several daemons: a faster daemon simply takes more, a failed one leaves.

Each daemon (one :class:`~k3lsp.auditor.Auditor`, one DEALER) has ``jobs`` workers pulling from the shared
queue. A daemon that cannot serve (``BackendUnavailable``: unreachable, killed, refusing our key) puts the
item it held back and stops taking work; the others finish the queue. Anything else an item raises costs
that item only. ``k3lsp audit`` spreads a whole tree this way (``k3lsp.batch``), the language server the
units of a workspace audit, and an interactive audit moves to the next daemon when its own fails
(``k3lsp.pool``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Generic, TypeVar

from k3lsp.auditor import Auditor, BackendUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


class Spread(Generic[T]):
    """The shared queue of one run; ``run`` returns when it is empty, no daemon is left, or ``stop`` is set."""

    def __init__(
        self,
        items: Sequence[T],
        work: Callable[[str, Auditor, T], Awaitable[None]],
        *,
        on_done: Callable[[T, Exception | None], None] | None = None,
        on_drop: Callable[[str, BackendUnavailable, set[str]], None] | None = None,
    ):
        """``work(endpoint, auditor, item)`` does one item; ``on_done(item, failure)`` follows each item done
        (``failure``: what it raised other than BackendUnavailable); ``on_drop(endpoint, why, live)`` follows a
        daemon's failure, with the daemons still live."""
        self.queue: asyncio.Queue[T] = asyncio.Queue()
        for item in items:
            self.queue.put_nowait(item)
        self.total = self.pending = len(items)
        self.live: set[str] = set()
        self.failure: BackendUnavailable | None = None  # the last daemon failure
        self._work, self._on_done, self._on_drop = work, on_done, on_drop
        self._finished = asyncio.Event()

    def left(self) -> list[T]:
        """The items not done (after ``run``: what no daemon could take)."""
        items = []
        while not self.queue.empty():
            items.append(self.queue.get_nowait())
        for item in items:
            self.queue.put_nowait(item)
        return items

    async def run(self, auditors: Mapping[str, Auditor], jobs: int, stop: asyncio.Event | None = None) -> None:
        self.live = set(auditors)
        if self.pending == 0 or not self.live:
            return
        self._finished.clear()
        # Interleaved, so that a short queue too is shared: each daemon's first worker takes an item first.
        workers = [asyncio.ensure_future(self._worker(e, a)) for _ in range(jobs) for e, a in auditors.items()]
        waits = [asyncio.ensure_future(self._finished.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*workers, *waits]:
                task.cancel()
            await asyncio.gather(*workers, *waits, return_exceptions=True)

    async def _worker(self, endpoint: str, auditor: Auditor) -> None:
        while endpoint in self.live:
            item = await self.queue.get()
            if endpoint not in self.live:  # this daemon failed while we waited: leave the item to the others
                self.queue.put_nowait(item)
                return
            failure = None
            try:
                await self._work(endpoint, auditor, item)
            except BackendUnavailable as exc:
                self.queue.put_nowait(item)
                self._drop(endpoint, exc)
                return
            except asyncio.CancelledError:  # the run ended (stopped, or no daemon left) with this item unfinished
                self.queue.put_nowait(item)
                raise
            except Exception as exc:  # anything else costs this item only: a dead worker would leave `pending` > 0
                log.exception("audit work on %s failed", endpoint)
                failure = exc
            self.pending -= 1
            if self._on_done is not None:
                self._on_done(item, failure)
            if self.pending == 0:
                self._finished.set()

    def _drop(self, endpoint: str, why: BackendUnavailable) -> None:
        if endpoint not in self.live:
            return
        self.live.discard(endpoint)
        self.failure = why
        if self._on_drop is not None:
            self._on_drop(endpoint, why, set(self.live))
        if not self.live:
            self._finished.set()
