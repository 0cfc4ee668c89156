"""Splitting files into units away from the language server's event loop, in processes of their own.

tree-sitter's parse holds the GIL for the whole parse (a 0.7 MB kernel file: about 120 ms on one core), so a
thread would still stop hovers and diagnostics for that long; a child process does not, and a file that
crashed the parser would take only the child with it. There is one worker per core, each a process of its own
(spawned: no copy of the server's threads and sockets); a new one replaces a worker that died. A split goes to
the worker with the fewest splits in flight, the first one when all are idle: the editor's splits, one at a
time, all go to the first worker, whose ``units.split`` cache answers a text it has just split, while a
workspace audit (or ``bench/kernel_scale.py``), with several files in flight, keeps every core busy (Linux's
45,838 files: a single worker was the whole tree's bottleneck). The first worker is started by ``start``, which
the language server calls as it starts: spawning it and importing the parsers there takes half a second, which
the first file opened waited for when the worker started on the first split; the others start on the first
split that finds the workers before them busy. Until that first worker is ready (started by the first split, if
that comes first), a text of at most ``WHILE_STARTING`` characters is split in this process, on the event loop (a
60 kB file: about 10 ms of parse), so the first file opened, when small, does not wait half a second for it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from k3lsp.units import split as units
from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit

log = logging.getLogger(__name__)

WORKERS = os.cpu_count() or 1
WHILE_STARTING = 64 * 1024  # characters: a text split here while the first worker starts


class Splitter:
    """``await split(text, macros)``: the units of a text, computed in a worker process."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._pools: list[ProcessPoolExecutor | None] = [None] * max(1, workers)
        self._busy = [0] * len(self._pools)  # splits in flight, per worker
        self._warm: Future | None = None  # the first worker's start (``start``), None before

    def _worker(self, k: int) -> ProcessPoolExecutor:
        pool = self._pools[k]
        if pool is None:
            pool = self._pools[k] = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return pool

    def start(self, macros: Macros) -> None:
        """Start the first worker now, its parsers loaded (an empty text split), without waiting for it; once."""
        if self._warm is None:
            self._warm = self._worker(0).submit(units.split, "", macros)

    async def split(self, text: str | bytes, macros: Macros) -> tuple[Unit, ...]:
        self.start(macros)  # a file opened before the settings were read: the worker starts now
        if not self._warm.done() and len(text) <= WHILE_STARTING:
            return units.split(text, macros)
        k = min(range(len(self._busy)), key=self._busy.__getitem__)  # the first of the least busy
        self._busy[k] += 1
        loop = asyncio.get_running_loop()
        try:
            pool = self._worker(k)
            try:
                return await loop.run_in_executor(pool, units.split, text, macros)
            except BrokenProcessPool:  # the worker died (killed, or a parser crash): one more try in a new one
                log.warning("a splitter process died; starting a new one")
                if self._pools[k] is pool:  # not replaced yet by another split that was in flight on it
                    self._pools[k] = None
                return await loop.run_in_executor(self._worker(k), units.split, text, macros)
        finally:
            self._busy[k] -= 1

    def close(self, wait: bool = False) -> None:
        """Stop the workers; ``wait``: until they have exited (their CPU time is then the caller's children's)."""
        for k, pool in enumerate(self._pools):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=True)
                self._pools[k] = None
