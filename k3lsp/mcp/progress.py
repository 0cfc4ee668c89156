"""The service's progress as MCP progress notifications, sent in order and never holding the audit up.

The service tells progress to a listener and a review to a plain callback; an agent's client may be slow to read.
So the latest count is kept and one task sends it, skipping counts that a newer one replaced, and the last count
is always sent before the tool answers. A client that gave no progress token gets nothing (the SDK's rule).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mcp.server.mcpserver import Context


class Reporter:
    """``reporter(done, total, note)``: what the agent is told next."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.latest: tuple[int, int, str] | None = None
        self.wake = asyncio.Event()

    def __call__(self, done: int, total: int, note: str) -> None:
        self.latest = (done, total, note)
        self.wake.set()

    async def send(self) -> None:
        if self.latest is not None:
            done, total, note = self.latest
            self.latest = None
            await self.ctx.report_progress(done, total, note or f"{done} of {total} units audited")

    async def pump(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await self.send()


@contextlib.asynccontextmanager
async def reporting(ctx: Context) -> AsyncIterator[Reporter]:
    """A reporter for the block; its last count sent when the block ends without an exception."""
    reporter = Reporter(ctx)
    pump = asyncio.create_task(reporter.pump())
    try:
        yield reporter
    finally:
        pump.cancel()  # not awaited: the block may be ending because the tool call was cancelled
    await reporter.send()
