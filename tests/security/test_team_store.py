"""The daemon's result store between people: one client's complete audits answer another's at once, over
CurveZMQ with a key each; a revoked key gets nothing from it; a re-audit asks for a fresh one; the store
survives a restart and stays private to the daemon's user."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from k3lsp.core.connection import DaemonUnavailable
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.units import split as units
from k3lsp.wire.cache import ResultCache
from tests.security.conftest import Keyring, team_keyring
from tests.support import kimi
from tests.support.core import audit, targets
from tests.support.daemon import serving

SOURCE = """\
int first(int n)
{
\treturn n + 1;
}

int second(char *p)
{
\treturn p[0];
}

int third(int a, int b)
{
\treturn a / b;
}
"""


def script() -> list[dict]:
    return [
        {
            "unit": "*",
            "turns": [
                kimi.turn(("report_finding", kimi.finding(start_line=1, end_line=2)), reasoning="the caller decides n")
            ],
        }
    ]


TIMEOUT = 120


def daemon_args(team: Keyring) -> list[str]:
    """CURVE with the team's keys; the allow-list re-read on every check, so a revoked key counts from its next
    message (by default the daemon's view may be a second old, and the revoked key's audit would be answered)."""
    return [
        "--max-tokens",
        "1000",
        "--server-key",
        str(team.server_secret),
        "--authorized-keys",
        str(team.authorized),
        "--keys-reload-seconds",
        "0",
    ]


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Keyring:
    """A daemon key and three people: alice and bob authorised, carol authorised until she is revoked."""
    return team_keyring(tmp_path_factory.mktemp("team"), ("alice", "bob", "carol"))


@pytest.fixture(scope="module")
def store_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store") / "private" / "store.sqlite3"


@pytest.fixture(scope="module")
def team_daemon(tiny_model, team, store_file):
    with serving(tiny_model, script=script(), args=daemon_args(team), store=store_file) as d:
        yield d


def auditor(endpoint: str, ring: Keyring, name: str, cache_dir: Path) -> Pool:
    """One person's editor side: their own key and their own local result cache."""
    options = Options(endpoint=endpoint, server_key=str(ring.server_public), client_key=str(ring.clients[name][1]))
    return Pool(options, ResultCache(cache_dir / name / "results.sqlite3"), client_name=name)


async def audit_file(person: Pool, *, fresh: bool = False) -> list:
    """What a save sends, or with ``fresh`` a re-audit: past the local cache, past the store."""
    results, _ = await audit(person, targets(SOURCE, "src/team.c"), force=fresh, fresh=fresh, timeout=TIMEOUT)
    return sorted(results, key=lambda r: r.unit.start_line)


async def test_the_second_person_gets_every_unit_from_the_store_with_nothing_generated(team_daemon, team, tmp_path):
    alice = auditor(team_daemon.endpoint, team, "alice", tmp_path)
    bob = auditor(team_daemon.endpoint, team, "bob", tmp_path)
    try:
        first = await asyncio.wait_for(audit_file(alice), TIMEOUT)
        second = await asyncio.wait_for(audit_file(bob), TIMEOUT)
    finally:
        await alice.close()
        await bob.close()
    assert [r.unit.name for r in second] == ["first", "second", "third"]
    assert all(r.stats.generated_tokens > 0 and not r.stats.from_store for r in first)
    for mine, theirs in zip(first, second, strict=True):
        assert not theirs.cached  # not from bob's own cache: he never audited it
        assert theirs.stats.from_store and theirs.stats.generated_tokens == 0
        assert theirs.stats.prompt_tokens == 0 and theirs.stats.cut_short is None
        assert theirs.stats.raw["stored"]["generated_tokens"] == mine.stats.generated_tokens
        assert theirs.findings == mine.findings and len(theirs.findings) == 1
    assert bob.counters.tokens == 0 and alice.counters.tokens > 0
    assert (bob.counters.from_store, alice.counters.from_store) == (3, 0)


async def test_a_revoked_key_gets_nothing_from_the_store(team_daemon, team, tmp_path):
    alice = auditor(team_daemon.endpoint, team, "alice", tmp_path)
    try:  # the store holds this file's units
        assert all(r.stats.from_store or r.stats.generated_tokens for r in await audit_file(alice))
    finally:
        await alice.close()
    carol = team.wire(team_daemon.endpoint, "carol")
    try:
        assert (await carol.ask("hello", "h", client="carol", version="0"))["kind"] == "welcome"  # in, for now
        team.revoke("carol")
        split = units.split(SOURCE)
        for i, unit in enumerate(split):
            msgs = await carol.request(
                "audit", f"a{i}", path="src/team.c", unit=unit.name, code=unit.text, context=unit.context
            )
            assert [m["kind"] for m in msgs] == ["error"] and msgs[0]["code"] == "unauthorized"
    finally:
        carol.close()
    later = auditor(team_daemon.endpoint, team, "carol", tmp_path)  # a new connection is refused at the handshake
    try:
        with pytest.raises(DaemonUnavailable) as err:
            await asyncio.wait_for(later.connections[0].ensure(), TIMEOUT)
        assert err.value.code == "unauthorized"
    finally:
        await later.close()
    async with team.wire(team_daemon.endpoint, "alice") as wire:
        status = (await wire.ask("status", "s"))["status"]
    assert status["store"]["entries"] == 3 and status["unauthorized"] >= 3


async def test_a_re_audit_is_fresh_and_the_store_survives_a_restart_private(
    tiny_model, team, store_file, tmp_path, team_daemon
):
    bob = auditor(team_daemon.endpoint, team, "bob", tmp_path)
    try:
        fresh = await asyncio.wait_for(audit_file(bob, fresh=True), TIMEOUT)
    finally:
        await bob.close()
    assert all(r.stats.generated_tokens > 0 and not r.stats.from_store for r in fresh)

    assert stat.S_IMODE(store_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(store_file.parent.stat().st_mode) == 0o700
    with serving(tiny_model, script=script(), args=daemon_args(team), store=store_file) as again:
        alice = auditor(again.endpoint, team, "alice", tmp_path / "new-cache")
        try:
            after = await asyncio.wait_for(audit_file(alice), TIMEOUT)
        finally:
            await alice.close()
    assert all(r.stats.from_store and r.stats.generated_tokens == 0 for r in after)
