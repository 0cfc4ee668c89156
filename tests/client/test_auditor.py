"""Auditor against a scripted ROUTER: the daemon's odd but valid answers become errors the session handles."""

from __future__ import annotations

import asyncio

import pytest

from k3lsp import auditor as auditor_module
from k3lsp import units
from k3lsp.auditor import Auditor, BackendUnavailable
from k3lsp.client import BackendError
from k3lsp.options import Options
from k3lsp.wire.cache import ResultCache
from tests.support.peer import WELCOME, peer, reply

UNIT = units.split("int f(int a)\n{\n\treturn a;\n}\n")[0]
FINDING = {"cwe": 787, "severity": "high", "title": "t", "message": "m", "start_line": 3, "end_line": 3}


def answering(kind: str, **fields):
    """A daemon that welcomes and answers every audit/explain with one terminal message."""

    async def handler(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
        elif msg["kind"] in ("audit", "explain"):
            await reply(sock, ident, kind, msg["id"], **fields)

    return handler


async def test_a_cancelled_explanation_is_a_backend_error_not_our_cancellation(tmp_path):
    async with peer(answering("cancelled")) as endpoint:
        auditor = Auditor(Options(endpoint=endpoint), ResultCache(tmp_path / "c.sqlite"))
        try:
            with pytest.raises(BackendError) as err:
                await asyncio.wait_for(anext(auditor.explain(tmp_path, "a.c", UNIT, FINDING)), 10)
        finally:
            await auditor.close()
    assert err.value.code == "cancelled"


async def test_odd_token_counts_in_stats_count_zero(tmp_path):
    stats = {"prompt_tokens": "12", "generated_tokens": 3, "extra": None}
    async with peer(answering("done", stats=stats)) as endpoint:
        auditor = Auditor(Options(endpoint=endpoint), ResultCache(tmp_path / "c.sqlite"))
        try:
            results = await asyncio.wait_for(_collect(auditor.audit(tmp_path, "a.c", [UNIT])), 10)
        finally:
            await auditor.close()
    assert [r.unit.name for r in results] == ["f"] and results[0].stats == stats
    assert auditor.counters.tokens == 3 and auditor.counters.audited == 1


async def _collect(results):
    return [r async for r in results]


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
                await reply(sock, ident, "done", msg["id"], stats={})
            else:
                await reply(sock, ident, "error", msg["id"], code=code, message=f"scripted {code}")

    return handler, sent


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(auditor_module, "RETRY_DELAYS", (0.05, 0.1, 0.2))


async def audit_once(endpoint: str, tmp_path):
    auditor = Auditor(Options(endpoint=endpoint), ResultCache(tmp_path / "c.sqlite"))
    try:
        return auditor, await asyncio.wait_for(_collect(auditor.audit(tmp_path, "a.c", [UNIT])), 20)
    finally:
        await auditor.close()


async def test_transient_errors_are_retried_with_backoff(tmp_path, quick_retries):
    handler, sent = erring(["busy", "rank_failure"])
    async with peer(handler) as endpoint:
        tic = asyncio.get_running_loop().time()
        auditor, results = await audit_once(endpoint, tmp_path)
        waited = asyncio.get_running_loop().time() - tic
    assert sent == ["f", "f", "f"] and [r.unit.name for r in results] == ["f"]
    assert auditor.counters.retries == 2 and auditor.counters.audited == 1 and auditor.counters.failed == 0
    assert waited >= 0.15  # the first two delays


async def test_transient_retries_are_bounded(tmp_path, quick_retries):
    handler, sent = erring(["shutdown"] * 10)
    async with peer(handler) as endpoint:
        with pytest.raises(BackendUnavailable) as err:
            await audit_once(endpoint, tmp_path)
    assert err.value.code == "shutdown" and len(sent) == 1 + len(auditor_module.RETRY_DELAYS)


@pytest.mark.parametrize("code", ["failed", "internal", "too_long"])
async def test_request_level_errors_are_never_retried(tmp_path, quick_retries, code):
    handler, sent = erring([code])
    async with peer(handler) as endpoint:
        auditor = Auditor(Options(endpoint=endpoint), ResultCache(tmp_path / "c.sqlite"))
        try:
            results = await asyncio.wait_for(_collect(auditor.audit(tmp_path, "a.c", [UNIT])), 20)
            assert sent == ["f"] and auditor.counters.failed == 1 and auditor.counters.retries == 0
            again = await asyncio.wait_for(_collect(auditor.audit(tmp_path, "a.c", [UNIT])), 20)
        finally:
            await auditor.close()
    if code == "too_long":  # remembered: not even sent a second time
        assert [r.refusal for r in results] == [f"scripted {code}"] and again[0].refusal == "scripted too_long"
        assert sent == ["f"] and auditor.counters.refused == 1
    else:  # a later audit (the next save) may ask again; this one did not
        assert results == [] and sent == ["f", "f"]
