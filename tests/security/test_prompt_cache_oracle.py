"""The engine's prompt cache tells no one what another person audited.

The daemon keeps the prompt caches of a file's shared context and of a conversation's last turn, and reports
how many prompt tokens it found cached (``done.stats.cached_tokens``). Shared between identities, that number
is an oracle: a member guesses another's file context and sees more tokens cached for the right guess than
for a wrong one (997 against 1150 in the report that found it), without any result store (``--no-store``).
Here two CURVE identities on one daemon: alice audits a unit of her file, mallory guesses its context.
"""

from __future__ import annotations

import pytest

from tests.security.conftest import Keyring, team_keyring
from tests.support import kimi
from tests.support.daemon import audit_fields, serving

SCRIPT = [{"unit": "*", "turns": [kimi.turn(content="no findings")]}]


def context(secret: str) -> str:
    """A file's declarations that say something about the code they come from (a long prefix to guess)."""
    return "".join(f"#define {secret}_FIELD_{i} (0x{i:04x} + sizeof(struct {secret}_header))\n" for i in range(12))


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Keyring:
    return team_keyring(tmp_path_factory.mktemp("oracle"), ("alice", "mallory"))


@pytest.fixture(scope="module")
def daemon(tiny_model, team):
    args = ["--max-tokens", "200", "--server-key", str(team.server_secret), "--authorized-keys", str(team.authorized)]
    with serving(tiny_model, script=SCRIPT, args=args) as d:  # no result store (the tests' default: --no-store)
        yield d


async def audit(wire, msg_id: str, unit: str, ctx: str) -> dict:
    msgs = await wire.request("audit", msg_id, **audit_fields(unit, path="src/vault.c", context=ctx))
    assert msgs[-1]["kind"] == "done", msgs[-1]
    return msgs[-1]["stats"]


async def test_the_cached_tokens_read_the_same_for_a_right_and_a_wrong_guess_of_anothers_context(daemon, team):
    async with team.wire(daemon.endpoint, "alice", timeout=120) as alice:
        await audit(alice, "a1", "open_vault", context("VAULT"))
    async with team.wire(daemon.endpoint, "mallory", timeout=120) as mallory:
        wrong = await audit(mallory, "m1", "guess", context("WAULT"))  # another secret, as many tokens
        right = await audit(mallory, "m2", "guess", context("VAULT"))
    assert wrong["cached_tokens"] > 0  # the system prompt alice's audit left: shared by everyone
    assert right["cached_tokens"] == wrong["cached_tokens"], (wrong, right)
    assert right["prompt_tokens"] == wrong["prompt_tokens"]


async def test_a_persons_own_file_context_is_still_cached_for_their_next_unit(daemon, team):
    async with team.wire(daemon.endpoint, "alice", timeout=120) as alice:
        first = await audit(alice, "b1", "close_vault", context("DRAWER"))
        second = await audit(alice, "b2", "lock_vault", context("DRAWER"))
    assert second["cached_tokens"] > first["cached_tokens"]  # the file's context, read once
