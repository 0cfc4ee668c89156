"""Splitting files into units away from the language server's event loop, in a process of its own.

tree-sitter's parse holds the GIL for the whole parse (a 0.7 MB kernel file: about 120 ms on one core), so a
thread would still stop hovers and diagnostics for that long; a child process does not, and a file that
crashed the parser would take only the child with it. One worker is enough: files are split one at a time,
and the worker's own ``units.split`` cache answers a text it has just split. The worker starts on the first
split (spawned: no copy of the server's threads and sockets), and a new one replaces a worker that died.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from k3lsp.units import split as units
from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit

log = logging.getLogger(__name__)


class Splitter:
    """``await split(text, macros)``: the units of a text, computed in the worker process."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    def _worker(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    async def split(self, text: str, macros: Macros) -> tuple[Unit, ...]:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._worker(), units.split, text, macros)
        except BrokenProcessPool:  # the worker died (killed, or a parser crash): one more try in a new one
            log.warning("the splitter process died; starting a new one")
            self._pool = None
            return await loop.run_in_executor(self._worker(), units.split, text, macros)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
