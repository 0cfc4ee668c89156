"""Background tasks whose failures are seen: the one way the editor side starts work nobody awaits.

A task that nobody awaits and that fails is reported by asyncio only when it is garbage-collected, as "Task
exception was never retrieved" with a traceback on stderr, after the moment that mattered (a daemon that went
away was never shown as down that way). Every fire-and-forget task of ``k3lsp`` goes through
:func:`background`: it is kept referenced until it ends (asyncio keeps only weak references), its exception
is retrieved and logged as one clear line, and cancelling it is not a failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

_running: set[asyncio.Task] = set()
T = TypeVar("T")


def background(
    coro: Coroutine[Any, Any, Any], what: str, expected: type[BaseException] | tuple[type[BaseException], ...] = ()
) -> asyncio.Task:
    """Start ``coro`` as a task; ``what`` names it in the log line if it fails (``"the hello to ipc://..."``).
    ``expected``: exceptions that are an outcome, not a failure (a hello's DaemonUnavailable, which the waiters
    get and the connection state already says), retrieved without a log line."""
    task = asyncio.ensure_future(coro)
    _running.add(task)
    task.add_done_callback(lambda t: _ended(t, what, expected))
    return task


def _ended(task: asyncio.Task, what: str, expected: type[BaseException] | tuple[type[BaseException], ...]) -> None:
    _running.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, expected):
        log.error("%s failed: %s: %s", what, type(exc).__name__, exc)
        log.debug("the failure of %s", what, exc_info=exc)


async def cancel(*tasks: asyncio.Task | None) -> None:
    """Cancel tasks and wait until they have ended; what they raised on the way out is logged, not raised."""
    live = [t for t in tasks if t is not None]
    for task in live:
        task.cancel()
    for outcome in await asyncio.gather(*live, return_exceptions=True):
        if isinstance(outcome, Exception):
            log.debug("a task ended with %s while it was cancelled", outcome)


class Interrupted(Exception):
    """``until_stopped``: the stop event came first."""


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> T:
    """``work``'s value; Interrupted as soon as ``stop`` is set (``work`` is then cancelled and awaited): how a
    batch front end ends early on SIGINT/SIGTERM, keeping what it finished."""
    job, stopped = asyncio.ensure_future(work), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([job, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        interrupted = not job.done()
        await cancel(stopped, job if interrupted else None)
    if interrupted:
        raise Interrupted
    return job.result()
