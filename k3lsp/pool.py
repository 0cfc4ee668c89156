"""Several daemons behind the language server: the ``endpoint`` setting may be a list of Mac pairs.

One :class:`~k3lsp.auditor.Auditor` per daemon (its own connection and state), one result cache for all.
Interactive work (an audit on save, a re-audit, an explanation) goes to the first reachable daemon in the
configured order, so one file's units share that daemon's prompt cache; when it fails mid-audit, the units
it had not finished move to the next one. Background work (a workspace audit) is spread over every
reachable daemon through the same queue ``k3lsp audit`` uses (``k3lsp.spread``). A result from any
configured daemon that serves the same checkpoint with the same prompt version answers a lookup
(``ResultKey.same_answers``), whichever daemon is asked next.

With a single endpoint the pool is that one auditor and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from k3lsp.auditor import (
    DEFAULT_CONCURRENCY,
    Auditor,
    BackendState,
    BackendUnavailable,
    Counters,
    Lookup,
    Progress,
    UnitResult,
)
from k3lsp.options import Options
from k3lsp.spread import Spread
from k3lsp.units import Unit
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import ErrorCode

_END = object()  # the end of one audit's results


class Pool:
    """The daemons of the ``endpoint`` setting, used from one event loop (the language server's)."""

    def __init__(
        self,
        options: Options,
        cache: ResultCache,
        *,
        on_state: Callable[[BackendState], None] | None = None,
        on_tool: Callable[[dict, bool, str], None] | None = None,
    ):
        self.cache = cache
        self._on_state = on_state
        self._on_tool = on_tool
        self.options = options
        self.auditors: dict[str, Auditor] = self._auditors(options)
        self._retries: set[asyncio.Task] = set()
        self._spreads: set[Spread] = set()  # running audits: their units not yet on a daemon count as queued

    def _auditors(self, options: Options) -> dict[str, Auditor]:
        return {
            e: Auditor(options.only(e), self.cache, on_state=lambda _: self._notify(), on_tool=self._on_tool)
            for e in options.endpoints
        }

    # --- state -------------------------------------------------------------------------------------------

    @property
    def state(self) -> BackendState:
        """Connected while any daemon is; otherwise the first daemon's state. Queues add up, with the units
        that no daemon has taken yet."""
        states = [a.state for a in self.auditors.values()]
        queued = sum(s.queued for s in states) + sum(s.queue.qsize() for s in self._spreads)
        running = sum(s.running for s in states)
        up = [s.message for s in states if s.state == "connected"]
        if len(states) == 1 or not up:
            return replace(states[0], queued=queued, running=running)
        down = len(states) - len(up)
        note = f"; {down} of {len(states)} daemons unreachable" if down else ""
        return BackendState("connected", queued, running, "; ".join(up) + note)

    def _notify(self) -> None:
        if self._on_state is not None:
            self._on_state(self.state)

    @property
    def counters(self) -> Counters:
        return Counters.total(a.counters for a in self.auditors.values())

    async def reconfigure(self, options: Options) -> None:
        """New settings: another list of daemons means new connections; otherwise each daemon's own settings."""
        old, self.options = self.options, options
        if old.endpoints != options.endpoints:
            await self.close()
            self.auditors = self._auditors(options)
            self._notify()
            return
        for endpoint, auditor in self.auditors.items():
            await auditor.reconfigure(options.only(endpoint))

    async def close(self) -> None:
        for task in self._retries:
            task.cancel()
        await asyncio.gather(*self._retries, return_exceptions=True)
        await asyncio.gather(*(a.close() for a in self.auditors.values()))

    # --- which daemon ------------------------------------------------------------------------------------

    async def _reachable(self) -> list[Auditor]:
        """Every daemon that ever answered, those connected now first, each group in the configured order.

        While one is connected, the others are retried in the background (an audit never waits for a dead
        daemon's connect timeout); when none is, all are tried and waited for, and the first daemon's
        BackendUnavailable is raised if none ever answered.
        """
        auditors = list(self.auditors.values())
        down = [a for a in auditors if a.state.state != "connected"]
        if len(down) < len(auditors):
            for auditor in down:
                self._retry(auditor)
        else:
            tried = await asyncio.gather(*(a.connect() for a in auditors), return_exceptions=True)
            failures = [t for t in tried if isinstance(t, BaseException)]
            if any(not isinstance(f, BackendUnavailable) for f in failures):
                raise next(f for f in failures if not isinstance(f, BackendUnavailable))
            if all(a.welcome is None for a in auditors):
                raise failures[0]
        return sorted((a for a in auditors if a.welcome is not None), key=lambda a: a.state.state != "connected")

    def _retry(self, auditor: Auditor) -> None:
        """Say hello again in the background (one attempt at a time: ``Auditor.connect`` shares it)."""
        task = asyncio.ensure_future(auditor.connect())
        self._retries.add(task)
        task.add_done_callback(lambda t: (self._retries.discard(t), t.cancelled() or t.exception()))

    # --- audits ------------------------------------------------------------------------------------------

    async def lookup(self, units: Sequence[Unit], *, priority: str = "interactive", force: bool = False) -> Lookup:
        """``Auditor.lookup`` on the first reachable daemon, accepting the results of every configured daemon
        that gives the same answers. Raises BackendUnavailable only when no daemon was ever reached."""
        first, *others = await self._reachable()
        also = [a.result_key for a in others if a.result_key is not None]
        return await first.lookup(units, priority=priority, force=force, also=also)

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
        """``Auditor.audit_uncached`` over the daemons: background units spread over all reachable ones,
        interactive ones on the first, moving on when it fails. Raises BackendUnavailable when no daemon is
        left with units still to audit."""
        results: asyncio.Queue = asyncio.Queue()

        async def work(_: str, auditor: Auditor, unit: Unit) -> None:
            one = auditor.audit_uncached(root, path, [unit], priority=priority, fresh=fresh, on_progress=on_progress)
            async with contextlib.aclosing(one) as stream:
                async for result in stream:
                    results.put_nowait(result)

        task = asyncio.ensure_future(self._spread(list(units), work, priority, results))
        try:
            while (result := await results.get()) is not _END:
                yield result
            await task  # raises BackendUnavailable when units were left
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _spread(self, units: list[Unit], work, priority: str, results: asyncio.Queue) -> None:
        try:
            reachable = await self._reachable()
            groups = [reachable] if priority == "background" else [[a] for a in reachable]
            failure = None
            for group in groups:
                spread = Spread(units, work)
                self._spreads.add(spread)
                self._notify()
                try:
                    await spread.run({a.options.endpoint: a for a in group}, DEFAULT_CONCURRENCY)
                finally:
                    self._spreads.discard(spread)
                units, failure = spread.left(), spread.failure or failure
                if not units:
                    return
            raise failure or BackendUnavailable(ErrorCode.DOWN, "no daemon is left to audit on")
        finally:
            results.put_nowait(_END)

    async def explain(self, root: Path | None, path: str, unit: Unit, finding: dict) -> AsyncIterator[str]:
        """``Auditor.explain`` on the first reachable daemon, or the next when one fails before it says a word."""
        reachable = await self._reachable()
        for i, auditor in enumerate(reachable):
            said = False
            try:
                async for piece in auditor.explain(root, path, unit, finding):
                    said = True
                    yield piece
                return
            except BackendUnavailable:
                if said or i == len(reachable) - 1:
                    raise

    async def status(self) -> dict:
        """The first reachable daemon's status, with all counters and, for several, each daemon's state. The
        counters and states are this side's as the request arrived (as ``Auditor.status`` has them), not after
        the hellos it may wait for."""
        state, counters = asdict(self.state), asdict(self.counters)
        states = {e: asdict(a.state) for e, a in self.auditors.items()}
        with contextlib.suppress(BackendUnavailable):
            await self._reachable()
        connected = [a for a in self.auditors.values() if a.state.state == "connected"]
        out = await (connected or list(self.auditors.values()))[0].status() | {"state": state, "counters": counters}
        if len(self.auditors) > 1:
            out["endpoints"] = states
        return out
