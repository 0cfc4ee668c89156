"""Every wait of the audit core ends (issue 39): a run never waits on a job that can no longer end.

Eight `k3lsp audit` processes on one daemon hung for ever: the daemon's per-client limit answered ``busy``, and
the fourth ``busy`` of one unit raised IndexError in the pool's retry, which killed the unit's task without
ending its job, so its run waited on an outcome that could never come. These tests drive the audit core against
scripted ROUTERs on real sockets (tests/support/peer.py); each one hung before the fix (the bounded collect of
``tests.support.core.audit`` timed out).
"""

from __future__ import annotations

import asyncio

import pytest

from k3lsp.core import pool as pool_module
from k3lsp.core.client import ClientOptions, DaemonClient
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.run import Summary
from k3lsp.wire.cache import ResultCache
from tests.support.core import audit, targets
from tests.support.daemon import audit_fields
from tests.support.peer import WELCOME, peer, reply

SOURCE = "int f(int a)\n{\n\treturn a;\n}\n"
DEADLINE = 0.5  # the scripted daemon's request deadline (welcome limits): how long a unit waits on ``busy``


def busy_until(free_after: int, *, deadline: float = DEADLINE):
    """A daemon whose first ``free_after`` audit requests are answered ``busy`` (its per-client limit), the
    rest ``done``; ``sent`` counts the requests."""
    sent: list[str] = []

    async def handler(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME | {"limits": {"deadline": deadline}})
        elif msg["kind"] == "audit":
            sent.append(msg["unit"])
            if len(sent) <= free_after:
                await reply(sock, ident, "error", msg["id"], code="busy", message="16 requests already open (limit 16)")
            else:
                await reply(sock, ident, "done", msg["id"], stats={"finish_reason": "stop"})

    return handler, sent


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(pool_module, "RETRY_DELAYS", (0.01, 0.02, 0.04))


def new_pool(endpoint: str, tmp_path, **kw) -> Pool:
    return Pool(Options(endpoint=endpoint), ResultCache(tmp_path / "c.sqlite"), **kw)


async def audited_by(handler, tmp_path, source: str = SOURCE, **kw) -> tuple[list, Summary]:
    """One run of ``source``'s units on a pool (``kw``: its options) whose daemon answers with ``handler``."""
    async with peer(handler) as endpoint:
        pool = new_pool(endpoint, tmp_path, **kw)
        try:
            return await audit(pool, targets(source), timeout=20)
        finally:
            await pool.close()


async def test_a_unit_the_daemon_keeps_refusing_as_busy_is_left_with_the_reason(tmp_path, quick_retries):
    handler, sent = busy_until(10_000)
    results, summary = await audited_by(handler, tmp_path)
    assert results == [] and [t.unit.name for t in summary.left] == ["f"]
    assert "busy" in summary.unavailable and "requests already open" in summary.unavailable, summary.unavailable
    assert len(sent) > pool_module.ATTEMPTS  # busy is not a failed daemon: asked until the deadline, not 4 times


async def test_a_busy_daemon_that_frees_a_slot_gets_the_unit(tmp_path, quick_retries):
    handler, sent = busy_until(6, deadline=30.0)
    results, summary = await audited_by(handler, tmp_path)
    assert [r.unit.name for r in results] == ["f"] and summary.complete and len(sent) == 7


async def test_a_front_end_whose_progress_callback_fails_gets_the_error_and_its_run_withdrawn(tmp_path):
    """The front end's progress callback runs in its own iteration of the run: what it raises reaches it at
    once, and the unit still in flight is withdrawn (the daemon hears ``cancel``) rather than left running
    until the abandoned stream happens to be collected."""
    cancelled = asyncio.Event()

    async def handler(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
        elif msg["kind"] == "audit":  # progress, then nothing until the unit is cancelled
            await reply(sock, ident, "progress", msg["id"], stage="prefill", tokens=1, total=2)
        elif msg["kind"] == "cancel":
            cancelled.set()

    def broken(unit, message):
        raise RuntimeError("the terminal went away")

    async with peer(handler) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        run = pool.audit(targets(SOURCE))
        try:
            with pytest.raises(RuntimeError, match="the terminal went away"):
                await asyncio.wait_for(_collect(run.audited(broken)), 20)
            await asyncio.wait_for(cancelled.wait(), 20)
        finally:
            await pool.close()


async def _collect(results) -> list:
    return [r async for r in results]


async def test_a_front_end_whose_state_callback_fails_still_gets_every_unit(tmp_path):
    """The pool tells the front end its state on every change (``on_state``); one that raises there must not stop
    the queue: every unit of the run is still sent and answered."""
    handler, sent = busy_until(0)

    def broken(state):
        raise RuntimeError("the status bar went away")

    results, summary = await audited_by(handler, tmp_path, SOURCE * 3, slots=1, on_state=broken)
    assert len(results) == 3 and summary.complete and len(sent) == 3


async def test_a_run_still_waiting_when_its_pool_closes_ends_with_its_units_left(tmp_path):
    async def silent(sock, ident, msg):  # welcomes, then never answers an audit
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)

    async with peer(silent) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        run = pool.audit(targets(SOURCE))
        collecting = asyncio.ensure_future(_collect(run.audited()))
        await asyncio.wait_for(_until(lambda: pool.state.running == 1), 10)
        await pool.close()
        results = await asyncio.wait_for(collecting, 10)
    assert results == [] and [t.unit.name for t in run.summary.left] == ["f"]
    assert run.summary.unavailable == "the audit core was closed"


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_a_request_the_daemon_no_longer_has_open_ends_instead_of_waiting():
    """A daemon that took an audit and no longer has it (it restarted within the liveness timeout, or the answer
    was lost on the way) while it answers every ping: its pongs list the requests it has open, and one missing
    from two of them in a row ends with an error that says so."""
    pings: list[str] = []

    async def forgetful(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
        elif msg["kind"] == "ping":
            pings.append(msg["id"])
            await reply(sock, ident, "pong", msg["id"], open=[])

    async with peer(forgetful) as endpoint:
        client = DaemonClient(ClientOptions(endpoint=endpoint, liveness_interval=0.1))
        try:
            await client.connect()
            stream = client.stream("audit", audit_fields("f"))
            message = await asyncio.wait_for(anext(stream), 10)
            await stream.aclose()
        finally:
            await client.close()
    assert message["kind"] == "error" and message["code"] == "down", message
    assert "no longer has request" in message["message"] and len(pings) >= 2
