"""Cached results: only complete audits are kept, under a key a different model or daemon cannot share.

A scripted ROUTER plays the daemon, so every finish reason and every welcome can be chosen: an audit cut
short (`deadline`, `length`, `loop`, `budget`) must not become a lasting "0 findings", and a daemon whose
checkpoint differs (same directory name, other weights), whose prompt version differs, or who sits at
another socket or behind another server key (``DaemonClient.daemon_identity``) must not be answered from
the first one's results.
"""

from __future__ import annotations

import pytest

from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.run import Target
from k3lsp.units import split as units
from k3lsp.wire import address
from k3lsp.wire.cache import ResultCache
from tests.support.core import audit
from tests.support.peer import WELCOME, peer, reply

UNIT = units.split("int f(char *p, int n)\n{\n\tp[n] = 0;\n\treturn n;\n}\n")[0]
FINDING = {
    "cwe": 787,
    "severity": "high",
    "title": "write past p",
    "message": "n is unchecked",
    "start_line": 3,
    "end_line": 3,
    "trace": [],
}
FINGERPRINT = "a" * 64


class Daemon:
    """A scripted daemon: its welcome and the finish reason of its next audits can change between audits."""

    def __init__(self, **welcome):
        self.welcome = (
            WELCOME
            | {"model": "Kimi-K3-Audit-451E", "fingerprint": FINGERPRINT, "limits": {"prompt_version": "p1"}}
            | welcome
        )
        self.finish = "stop"
        self.audits = 0

    async def __call__(self, sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **{k: v for k, v in self.welcome.items() if v is not None})
        elif msg["kind"] == "audit":
            self.audits += 1
            await reply(sock, ident, "finding", msg["id"], finding=FINDING)
            await reply(sock, ident, "done", msg["id"], stats={"finish_reason": self.finish, "generated_tokens": 9})


async def audit_once(endpoint: str, cache: ResultCache, **client) -> list:
    pool = Pool(Options(endpoint=endpoint, **client), cache)
    try:
        return (await audit(pool, [Target(None, "f.c", UNIT)], timeout=10))[0]
    finally:
        await pool.close()


@pytest.mark.parametrize("reason", ["deadline", "length", "loop", "budget"])
async def test_an_audit_cut_short_is_not_cached_and_is_shown_as_incomplete(tmp_path, reason):
    daemon, cache = Daemon(), ResultCache(tmp_path / "c.sqlite")
    daemon.finish = reason
    async with peer(daemon) as endpoint:
        (first,) = await audit_once(endpoint, cache)
        assert first.cut_short == reason and not first.cached
        assert first.findings == [FINDING]  # what was found is still shown, marked incomplete
        (again,) = await audit_once(endpoint, cache)  # the next audit asks the daemon again
        assert not again.cached and daemon.audits == 2
        daemon.finish = "stop"
        (complete,) = await audit_once(endpoint, cache)
        (hit,) = await audit_once(endpoint, cache)
    assert complete.cut_short is None and not complete.cached
    assert hit.cached and hit.findings == [FINDING] and hit.cut_short is None and daemon.audits == 3


async def test_a_done_without_a_finish_reason_is_not_taken_as_complete(tmp_path):
    daemon, cache = Daemon(), ResultCache(tmp_path / "c.sqlite")
    daemon.finish = None
    async with peer(daemon) as endpoint:
        (first,) = await audit_once(endpoint, cache)
        await audit_once(endpoint, cache)
    assert first.cut_short == "unknown" and daemon.audits == 2


async def test_another_checkpoint_under_the_same_name_does_not_reuse_results(tmp_path):
    daemon, cache = Daemon(), ResultCache(tmp_path / "c.sqlite")
    async with peer(daemon) as endpoint:
        await audit_once(endpoint, cache)
        daemon.welcome["fingerprint"] = "b" * 64  # same model name, other weights
        (other,) = await audit_once(endpoint, cache)
        daemon.welcome["limits"] = {"prompt_version": "p2"}  # and another prompt
        (prompt,) = await audit_once(endpoint, cache)
        daemon.welcome |= {"fingerprint": FINGERPRINT, "limits": {"prompt_version": "p1"}}
        (first_again,) = await audit_once(endpoint, cache)
    assert not other.cached and not prompt.cached and first_again.cached
    assert daemon.audits == 3


async def test_a_daemon_that_names_no_checkpoint_gets_no_cached_results(tmp_path):
    daemon, cache = Daemon(fingerprint=None), ResultCache(tmp_path / "c.sqlite")
    async with peer(daemon) as endpoint:
        (first,) = await audit_once(endpoint, cache)
        (second,) = await audit_once(endpoint, cache)
    assert first.findings == [FINDING] and not second.cached and daemon.audits == 2
    assert cache.stats()["entries"] == 0


async def test_results_of_one_daemon_are_not_shown_for_another(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    first, second = Daemon(), Daemon()  # the very same checkpoint and prompt, served at two endpoints
    async with peer(first) as a, peer(second) as b:
        await audit_once(a, cache)
        (elsewhere,) = await audit_once(b, cache)
    assert not elsewhere.cached and second.audits == 1


def test_every_component_changes_the_key():
    base = address.ResultKey(fingerprint="f", prompt_version="p", daemon="ipc:/run/a.sock")
    variants = [
        address.ResultKey("g", "p", "ipc:/run/a.sock").digest("low"),
        address.ResultKey("f", "q", "ipc:/run/a.sock").digest("low"),
        base.digest("high"),
        address.ResultKey("f", "p", "curve:server-key").digest("low"),
        address.ResultKey("f\0p", "", "ipc:/run/a.sock").digest("low"),  # no ambiguity between components
    ]
    assert len({base.digest("low"), *variants}) == len(variants) + 1
    assert base.digest("low") == address.ResultKey("f", "p", "ipc:/run/a.sock").digest("low")


def test_a_result_at_a_higher_effort_answers_a_request_at_a_lower_one():
    key = address.ResultKey("f", "p", "ipc:/run/a.sock")
    assert key.answering("low") == [key.digest("low"), key.digest("high"), key.digest("max")]
    assert key.answering("max") == [key.digest("max")]
    assert key.digest("off") not in key.answering("low")
