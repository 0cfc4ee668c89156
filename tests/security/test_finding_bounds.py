"""Bounds on what one unit may report, on both sides, and a cache bounded in bytes.

20,000 findings for a 6-line unit once took 3.6 GB in the editor, an 886 MB cache row and an 838 MB JSON
report. The daemon's agent now sends at most ``bounds.MAX_FINDINGS_PER_UNIT`` (through the real engine here), the
editor keeps at most that from a daemon that sends more (a scripted hostile daemon), and findings too large
on their own or together are dropped; what is dropped is counted and reported. The cache evicts the least
recently used results beyond its byte bound.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from backend.agent import AgentConfig
from backend.engine import Engine, EngineArgs
from backend.script import parse_script
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.run import Target
from k3lsp.units import split as units
from k3lsp.wire import bounds, cache
from tests.support import kimi
from tests.support.agent import recording_agent
from tests.support.batch import run_k3lsp
from tests.support.core import audit
from tests.support.daemon import audit_fields
from tests.support.peer import WELCOME, peer, reply

SMALL = {"cwe": 787, "severity": "low", "title": "t", "message": "", "start_line": 1, "end_line": 1}
SIX_LINES = "int f(char *p, int n)\n{\n\tp[n] = 0;\n\tp[n + 1] = 0;\n\treturn n;\n}\n"
UNIT = units.split(SIX_LINES)[0]
# Each scripted token is a forward pass of the tiny model, and one report_finding call is 168 of them: a flood
# past the real bound (64) took over 3 minutes (and failed on a loaded machine), so the daemon's test lowers the
# bound, which the agent reads at every finding, and floods past that.
LOW_BOUND = 2
FLOOD = LOW_BOUND + 3


async def test_the_daemon_sends_at_most_the_bound_and_counts_the_rest(tiny_model, monkeypatch, caplog):
    monkeypatch.setattr(bounds, "MAX_FINDINGS_PER_UNIT", LOW_BOUND)
    script = parse_script([{"unit": "flood", "turns": [kimi.turn(*[("report_finding", SMALL)] * FLOOD)]}])
    engine = Engine(EngineArgs(model=str(tiny_model), max_tokens=2000, trust_remote_code=True), hooks=script)

    async def no_tools(tool: str, args: dict) -> tuple[bool, str]:
        return False, "no tools here"

    async with recording_agent(engine, AgentConfig(max_tokens=2000), no_tools) as (agent, sent):
        with caplog.at_level(logging.WARNING, logger="backend.agent"):
            stats = await agent.audit(audit_fields("flood"))
    found = [fields["finding"] for kind, fields in sent if kind == "finding"]
    assert stats["finish_reason"] == "stop" and stats["rounds"] == 1  # the whole flood was generated, once
    assert len(found) == LOW_BOUND and stats["findings"] == LOW_BOUND
    assert stats[bounds.OVER_LIMIT] == FLOOD - LOW_BOUND
    assert "dropping findings beyond the bounds of one unit" in caplog.text


def big(size: int, n: int = 0) -> dict:
    """A valid finding of about ``size`` bytes of JSON: a long message and a long trace."""
    notes = [{"line": 1, "note": "x" * 1900} for _ in range(max(0, (size - 8000) // 1930))]
    return SMALL | {"title": f"big {n}", "message": "m" * min(size, 7900), "trace": notes}


class Flooding:
    """A hostile daemon: the findings it sends for every audit, then done."""

    def __init__(self, findings: list[dict], **stats):
        self.findings = findings
        self.stats = {"finish_reason": "stop", bounds.OVER_LIMIT: 3} | stats

    async def __call__(self, sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **(WELCOME | {"fingerprint": "f" * 64}))
        elif msg["kind"] == "audit":
            for finding in self.findings:
                await reply(sock, ident, "finding", msg["id"], finding=finding)
            await reply(sock, ident, "done", msg["id"], stats=self.stats)


async def audit_with(findings: list[dict], tmp_path, **stats) -> tuple[list, Pool, cache.ResultCache]:
    store = cache.ResultCache(tmp_path / "c.sqlite")
    async with peer(Flooding(findings, **stats), sndhwm=0) as endpoint:
        pool = Pool(Options(endpoint=endpoint), store)
        try:
            results, _ = await audit(pool, [Target(None, "f.c", UNIT)], timeout=120)
        finally:
            await pool.close()
    return results, pool, store


@pytest.mark.parametrize(
    ("findings", "kept"),
    [
        ([SMALL] * 2_000, bounds.MAX_FINDINGS_PER_UNIT),  # too many
        ([big(100_000), SMALL], 1),  # one too large on its own
        ([big(60_000, n) for n in range(12)], bounds.MAX_RESULT_BYTES // bounds.finding_bytes(big(60_000, 10))),
    ],
    ids=["count", "finding-bytes", "result-bytes"],
)  # the last: each fits, together they do not
async def test_the_editor_keeps_what_fits_from_a_daemon_that_sends_more(findings, kept, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="k3lsp.core.request"):
        (result,), pool, store = await asyncio.wait_for(audit_with(findings, tmp_path), 120)
    assert len(result.findings) == kept
    assert result.stats.over_limit == len(findings) - kept + 3  # the daemon's own count and ours
    assert pool.counters.over_limit == result.stats.over_limit
    assert "dropping what the daemon sends beyond" in caplog.text
    row = store.get(UNIT.key, pool.connections[0].result_key.digest("low"))
    assert row is not None and len(json.dumps(row.findings)) <= bounds.MAX_RESULT_BYTES
    assert store.stats()["result_bytes"] <= bounds.MAX_RESULT_BYTES + 1000


async def test_the_stats_kept_with_a_result_are_bounded_too(tmp_path):
    junk = {"junk": "x" * 4_000_000, "turns": [{"prompt_tokens": 1}] * 1000, "generated_tokens": 12}
    (result,), pool, store = await asyncio.wait_for(audit_with([SMALL], tmp_path, **junk), 60)
    assert result.cut_short is None and [f["title"] for f in result.findings] == [SMALL["title"]]
    row = store.get(UNIT.key, pool.connections[0].result_key.digest("low"))
    assert row.stats == {"finish_reason": "stop", bounds.OVER_LIMIT: 3, "generated_tokens": 12}
    assert store.stats()["result_bytes"] < 1000


async def test_the_batch_report_stays_bounded_and_says_what_was_dropped(tmp_path):
    (tmp_path / "f.c").write_text(SIX_LINES)
    sent = 2_000  # 30 times the bound: the 20,000 of the incident prove no more and took 7 s
    async with peer(Flooding([SMALL] * sent), sndhwm=0) as endpoint:
        code, out, err = await run_k3lsp(
            "audit", "f.c", "--endpoint", endpoint, "--json", cache=tmp_path / "c", cwd=tmp_path
        )
    assert code == 1, err
    assert len(json.loads(out)["findings"]) == bounds.MAX_FINDINGS_PER_UNIT and len(out) < 200_000
    assert f"{sent - bounds.MAX_FINDINGS_PER_UNIT + 3} findings beyond the bounds of one unit were dropped" in err


def test_the_cache_evicts_the_least_recently_used_beyond_its_bound(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(cache, "TOUCH_SECONDS", 0.0)
    row = [{"message": "x" * 980}]  # ~1,000 bytes of JSON with its stats
    size = len(json.dumps(row)) + len(json.dumps({}))
    store = cache.ResultCache(tmp_path / "r.sqlite3", max_bytes=4 * size + size // 2)
    for key in "abcd":
        store.put(key, "r", row)
    assert store.get("a", "r") is not None  # a is now the most recently used
    with caplog.at_level(logging.INFO, logger="k3lsp.wire.cache"):
        store.put("e", "r", row)  # over the bound: b, the least recently used, goes
    assert [k for k in "abcde" if store.get(k, "r") is not None] == ["a", "c", "d", "e"]
    stats = store.stats()
    assert stats["evicted"] == 1 and stats["result_bytes"] == 4 * size <= stats["max_bytes"]
    assert "evicted the 1 least recently used results" in caplog.text

    store.put("huge", "r", [{"message": "x" * (5 * size)}])  # larger than the whole cache: refused
    assert store.get("huge", "r") is None and store.stats()["refused"] == 1 and store.get("e", "r") is not None


def test_the_byte_bound_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_MAX_BYTES, "12345")
    assert cache.ResultCache(tmp_path / "a.sqlite3").max_bytes == 12345
    monkeypatch.setenv(cache.ENV_MAX_BYTES, "lots")
    assert cache.ResultCache(tmp_path / "b.sqlite3").max_bytes == cache.DEFAULT_MAX_BYTES
