"""Auditor against a scripted ROUTER: the daemon's odd but valid answers become errors the session handles."""

from __future__ import annotations

import asyncio

import pytest

from k3lsp import units
from k3lsp.auditor import Auditor
from k3lsp.cache import ResultCache
from k3lsp.client import BackendError
from k3lsp.options import Options
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
