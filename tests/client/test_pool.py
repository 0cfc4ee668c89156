"""The audit core (k3lsp.core.pool) against scripted ROUTERs on real sockets: retries, fail-over, the priority gate,
requests that fail alone, refusals remembered, and odd but valid answers."""

from __future__ import annotations

import asyncio

import pytest

from k3lsp.core import pool as pool_module
from k3lsp.core.client import DaemonError
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.run import Target
from k3lsp.units import split as units
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import Priority
from tests.support.core import audit
from tests.support.peer import WELCOME, peer, reply

UNIT = units.split("int f(int a)\n{\n\treturn a;\n}\n")[0]
FINDING = {"cwe": 787, "severity": "high", "title": "t", "message": "m", "start_line": 3, "end_line": 3}


def targets(tmp_path, *names: str) -> list[Target]:
    """One target per name: a one-line function each, in a.c."""
    src = "".join(f"int {n}(int a)\n{{\n\treturn a;\n}}\n" for n in names)
    return [Target(tmp_path, "a.c", u) for u in units.split(src)]


def answering(kind: str, **fields):
    """A daemon that welcomes and answers every audit/explain with one terminal message."""

    async def handler(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
        elif msg["kind"] in ("audit", "explain"):
            await reply(sock, ident, kind, msg["id"], **fields)

    return handler


def run_all(pool: Pool, items: list[Target], priority: Priority = Priority.INTERACTIVE):
    return audit(pool, items, priority=priority, timeout=20)


def new_pool(endpoints: str | list[str], tmp_path, **kw) -> Pool:
    first, *others = [endpoints] if isinstance(endpoints, str) else endpoints
    options = Options(endpoint=first, other_endpoints=tuple(others))
    return Pool(options, ResultCache(tmp_path / "c.sqlite"), **kw)


async def test_a_cancelled_explanation_is_a_daemon_error_not_our_cancellation(tmp_path):
    async with peer(answering("cancelled")) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        try:
            with pytest.raises(DaemonError) as err:
                await asyncio.wait_for(anext(pool.explain(Target(tmp_path, "a.c", UNIT), FINDING)), 10)
        finally:
            await pool.close()
    assert err.value.code == "cancelled"


async def test_odd_token_counts_in_stats_count_zero(tmp_path):
    stats = {"prompt_tokens": "12", "generated_tokens": 3, "extra": None}
    async with peer(answering("done", stats=stats)) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        try:
            results, _ = await run_all(pool, [Target(tmp_path, "a.c", UNIT)])
        finally:
            await pool.close()
    assert [r.unit.name for r in results] == ["f"] and results[0].stats.raw == stats
    assert pool.counters.tokens == 3 and pool.counters.audited == 1


def erring(codes: list[str]):
    """A daemon that answers the n-th audit with error codes[n] (then done): counts what it was sent."""
    sent: list[str] = []

    async def handler(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
        elif msg["kind"] == "audit":
            sent.append(msg["unit"])
            code = codes[len(sent) - 1] if len(sent) <= len(codes) else None
            if code is None:
                await reply(sock, ident, "done", msg["id"], stats={"finish_reason": "stop"})
            else:
                await reply(sock, ident, "error", msg["id"], code=code, message=f"scripted {code}")

    return handler, sent


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(pool_module, "RETRY_DELAYS", (0.05, 0.1, 0.2))


async def test_transient_errors_are_retried_with_backoff(tmp_path, quick_retries):
    handler, sent = erring(["busy", "rank_failure"])
    async with peer(handler) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        tic = asyncio.get_running_loop().time()
        try:
            results, summary = await run_all(pool, [Target(tmp_path, "a.c", UNIT)])
        finally:
            await pool.close()
        waited = asyncio.get_running_loop().time() - tic
    assert sent == ["f", "f", "f"] and [r.unit.name for r in results] == ["f"] and summary.complete
    assert pool.counters.retries == 2 and pool.counters.audited == 1 and pool.counters.failed == 0
    # the busy daemon's backoff (its first delay, jittered down to half), then the revival's first after the pair failed
    first = pool_module.RETRY_DELAYS[0]
    assert waited >= first * 0.5 + first


async def test_transient_retries_are_bounded_and_the_unit_is_left_with_the_reason(tmp_path, quick_retries):
    handler, sent = erring(["shutdown"] * 10)
    async with peer(handler) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        try:
            results, summary = await run_all(pool, [Target(tmp_path, "a.c", UNIT)])
        finally:
            await pool.close()
    assert results == [] and [t.unit.name for t in summary.left] == ["f"]
    assert "scripted shutdown" in summary.unavailable and len(sent) == pool_module.ATTEMPTS


@pytest.mark.parametrize("code", ["failed", "internal", "too_long"])
async def test_request_level_errors_are_never_retried(tmp_path, quick_retries, code):
    handler, sent = erring([code])
    async with peer(handler) as endpoint:
        pool = new_pool(endpoint, tmp_path)
        try:
            results, summary = await run_all(pool, [Target(tmp_path, "a.c", UNIT)])
            assert sent == ["f"] and pool.counters.retries == 0
            again, _ = await run_all(pool, [Target(tmp_path, "a.c", UNIT)])
        finally:
            await pool.close()
    if code == "too_long":  # remembered: not even sent a second time
        assert [r.refusal for r in results] == [f"scripted {code}"] and again[0].refusal == "scripted too_long"
        assert sent == ["f"] and pool.counters.refused == 1 and summary.refused == results
    else:  # a later run (the next save) may ask again; this one did not
        assert results == [] and sent == ["f", "f"] and pool.counters.failed == 1 and len(again) == 1
        assert [(f.target.unit.name, f.code) for f in summary.failed] == [("f", code)]


def holding(gate: asyncio.Event, order: list[str]):
    """A daemon that answers every audit once ``gate`` is set, in the order they arrive (recorded)."""
    answers: set[asyncio.Task] = set()

    async def answer(sock, ident, msg):
        await gate.wait()
        await reply(sock, ident, "done", msg["id"], stats={"finish_reason": "stop"})

    async def handler(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
        elif msg["kind"] == "audit":
            order.append(msg["unit"])
            task = asyncio.ensure_future(answer(sock, ident, msg))
            answers.add(task)
            task.add_done_callback(answers.discard)

    return handler


async def test_a_free_slot_goes_to_the_oldest_interactive_unit_before_background_ones(tmp_path):
    gate, order = asyncio.Event(), []
    async with peer(holding(gate, order)) as endpoint:
        pool = new_pool(endpoint, tmp_path, slots=1)
        try:
            background = asyncio.ensure_future(run_all(pool, targets(tmp_path, "bg1", "bg2"), Priority.BACKGROUND))
            while order != ["bg1"]:
                await asyncio.sleep(0.01)
            interactive = asyncio.ensure_future(run_all(pool, targets(tmp_path, "fg")))
            while pool.state.queued < 2:  # bg2 and fg wait for the one slot
                await asyncio.sleep(0.01)
            gate.set()
            await asyncio.wait_for(asyncio.gather(background, interactive), 20)
        finally:
            await pool.close()
    assert order == ["bg1", "fg", "bg2"]
    assert pool.state.queued == 0 and pool.state.running == 0


async def test_another_daemon_finishes_what_a_failed_one_held(tmp_path, quick_retries):
    failing, sent_a = erring(["shutdown"] * 100)
    working, sent_b = erring([])
    async with peer(failing) as a, peer(working) as b:
        pool = new_pool([a, b], tmp_path, slots=2)
        try:
            names = [f"u{i}" for i in range(8)]
            results, summary = await run_all(pool, targets(tmp_path, *names), Priority.BACKGROUND)
        finally:
            await pool.close()
    assert sorted(r.unit.name for r in results) == names and summary.complete
    assert sorted(sent_b) == names and sent_a  # a failed, b took everything
    assert summary.dropped and "its units go to" in summary.dropped[0] and b in summary.dropped[0]


async def test_interactive_units_go_to_the_first_daemon_and_move_when_it_fails(tmp_path, quick_retries):
    failing, sent_a = erring(["rank_failure"])
    working, sent_b = erring([])
    async with peer(failing) as a, peer(working) as b:
        pool = new_pool([a, b], tmp_path)
        try:
            results, summary = await run_all(pool, targets(tmp_path, "f1"))
            again, _ = await run_all(pool, targets(tmp_path, "f2"))
        finally:
            await pool.close()
    assert [r.unit.name for r in results] == ["f1"] and results[0].endpoint == b and summary.complete
    assert sent_a == ["f1"]  # the first daemon's failure marked it down: the next unit goes to b at once
    assert [r.endpoint for r in again] == [b] and sent_b == ["f1", "f2"]


async def test_leaving_a_run_early_withdraws_its_work_from_the_daemon(tmp_path):
    gate, order = asyncio.Event(), []
    cancels: list[str] = []
    hold = holding(gate, order)

    async def handler(sock, ident, msg):
        if msg["kind"] == "cancel":
            cancels.append(msg["id"])
        else:
            await hold(sock, ident, msg)

    async with peer(handler) as endpoint:
        pool = new_pool(endpoint, tmp_path, slots=2)
        try:
            task = asyncio.ensure_future(run_all(pool, targets(tmp_path, "a", "b", "c", "d")))
            while len(order) < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            while len(cancels) < 2:
                await asyncio.sleep(0.01)
        finally:
            await pool.close()
    assert order == ["a", "b"] and len(cancels) == 2  # the two in flight cancelled, the two queued never sent
    assert pool.state.queued == 0 and pool.state.running == 0 and pool.counters.cancelled == 2
