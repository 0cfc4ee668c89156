"""Fair admission between people: one person's 200-unit workspace audit does not make another's 5 units
wait behind it (an ordering test on a real keyed daemon), and the slots' own order, unit by unit."""

from __future__ import annotations

import asyncio

import pytest

from backend.fairshare import FairShare
from k3lsp.wire.protocol import Priority
from tests.security.conftest import Keyring, team_keyring
from tests.support import kimi
from tests.support.daemon import audit_fields, serving

SCRIPT = [{"unit": "*", "turns": [kimi.turn(content="no findings")]}]
BIG, SMALL = 200, 5


def unit(name: str, i: int) -> dict:
    """A distinct unit (its own code), at background priority: a workspace audit's."""
    return audit_fields(name, code=f"int {name}(int n)\n{{\n\treturn n + {i};\n}}\n", priority="background")


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Keyring:
    return team_keyring(tmp_path_factory.mktemp("fair"), ("alice", "bob"))


async def test_a_small_audit_finishes_before_a_big_one_started_first_is_a_quarter_done(tiny_model, team):
    args = [
        "--max-concurrency",
        "2",
        "--max-open-per-client",
        str(BIG + 10),
        "--max-tokens",
        "200",
        "--server-key",
        str(team.server_secret),
        "--authorized-keys",
        str(team.authorized),
    ]
    with serving(tiny_model, script=SCRIPT, args=args) as daemon:
        async with (
            team.wire(daemon.endpoint, "alice", timeout=120) as alice,
            team.wire(daemon.endpoint, "bob", timeout=120) as bob,
        ):
            for i in range(BIG):
                await alice.send("audit", f"a{i}", **unit(f"a{i}", i))
            done = []

            async def count_alice() -> None:
                while True:
                    msg = await alice.recv()
                    if msg["kind"] in ("done", "error", "cancelled"):
                        assert msg["kind"] == "done", msg
                        done.append(msg["id"])

            counting = asyncio.ensure_future(count_alice())
            try:
                for _ in range(600):  # alice's audit is under way: every slot is hers, the rest of it waits
                    if done:
                        break
                    await asyncio.sleep(0.05)
                assert done
                for i in range(SMALL):
                    await bob.send("audit", f"b{i}", **unit(f"b{i}", i))
                status = (await bob.ask("status", "s"))["status"]
                ends = await asyncio.gather(*(bob.finish(f"b{i}") for i in range(SMALL)))
                finished_by_then = len(done)
            finally:
                counting.cancel()
        assert all(msgs[-1]["kind"] == "done" for msgs in ends)
        assert finished_by_then < 50, f"alice had {finished_by_then} of {BIG} units done before bob's {SMALL}"
    queues = status["queues"]
    assert queues["you"]["open"] == SMALL
    (other,) = [q for name, q in queues.items() if name != "you"]
    assert other["open"] >= BIG - 50 and other["waiting"] > 0 and other["running"] <= 1  # 1: the reserve
    assert all(name == "you" or name.startswith("client-") for name in queues)
    text = repr(status)
    assert "src/f.c" not in text and "return n" not in text  # no paths, no code of anyone
    assert team.clients["alice"][0].read_text().split('"')[1] not in text  # nor alice's key


async def test_slots_go_interactive_first_then_to_whoever_holds_fewest_then_round_robin():
    fair, order = FairShare(1), []

    async def request(who: str, priority: int, hold: asyncio.Event) -> None:
        async with fair.slot(who, priority):
            order.append(who)
            await hold.wait()

    first = asyncio.Event()
    holder = asyncio.ensure_future(request("alice", Priority.BACKGROUND, first))
    await asyncio.sleep(0)
    go = asyncio.Event()
    go.set()
    waiting = [
        asyncio.ensure_future(request(who, pri, go))
        for who, pri in [
            ("alice", Priority.BACKGROUND),
            ("alice", Priority.BACKGROUND),
            ("alice", Priority.BACKGROUND),
            ("bob", Priority.BACKGROUND),
            ("bob", Priority.BACKGROUND),
            ("carol", Priority.INTERACTIVE),
        ]
    ]
    await asyncio.sleep(0)
    assert fair.depths() == {
        "alice": {"waiting": 3, "running": 1},
        "bob": {"waiting": 2, "running": 0},
        "carol": {"waiting": 1, "running": 0},
    }
    first.set()
    await asyncio.gather(holder, *waiting)
    assert order == ["alice", "carol", "alice", "bob", "alice", "bob", "alice"]
    assert fair.depths() == {}


async def test_a_cancelled_wait_gives_its_turn_away_and_loses_nothing():
    fair = FairShare(1)
    hold = asyncio.Event()

    async def request(who: str) -> None:
        async with fair.slot(who, Priority.BACKGROUND):
            await hold.wait()

    holder = asyncio.ensure_future(request("alice"))
    await asyncio.sleep(0)
    gone, next_one = asyncio.ensure_future(request("bob")), asyncio.ensure_future(request("carol"))
    await asyncio.sleep(0)
    gone.cancel()
    hold.set()
    await asyncio.gather(holder, next_one)
    assert gone.cancelled() and fair.depths() == {}


async def holding(fair: FairShare, who: str, priority: int, started: list, hold: asyncio.Event, tag=None) -> None:
    """One request: waits for a slot, notes that it started (as ``tag``, or ``who``), holds it until ``hold``."""
    async with fair.slot(who, priority):
        started.append(who if tag is None else tag)
        await hold.wait()


async def test_background_requests_leave_the_interactive_reserve_free():
    fair, hold = FairShare(2, interactive_reserve=1), asyncio.Event()
    started = []
    tasks = [asyncio.ensure_future(holding(fair, who, Priority.BACKGROUND, started, hold)) for who in ("alice", "bob")]
    await asyncio.sleep(0)
    assert started == ["alice"]  # bob's background request waits: the second slot is the reserve
    tasks.append(asyncio.ensure_future(holding(fair, "carol", Priority.INTERACTIVE, started, hold)))
    await asyncio.sleep(0)
    assert started == ["alice", "carol"]  # an edit starts at once, even behind a waiting workspace audit
    hold.set()
    await asyncio.gather(*tasks)
    assert started == ["alice", "carol", "bob"] and fair.depths() == {}


async def test_one_identity_flooding_interactive_requests_takes_one_interactive_turn_not_the_reserve():
    """Anyone may say ``priority: interactive``: mallory says it for everything. She gets one interactive turn at a
    time; the rest of her requests wait like background ones, so the reserve stays free for alice's edit."""
    fair, hold = FairShare(3, interactive_reserve=2), asyncio.Event()
    started = []
    flood = [asyncio.ensure_future(holding(fair, "mallory", Priority.INTERACTIVE, started, hold)) for _ in range(6)]
    await asyncio.sleep(0)
    assert started == ["mallory", "mallory"]  # one interactive turn, one background slot: the reserve is left
    alice = asyncio.ensure_future(holding(fair, "alice", Priority.INTERACTIVE, started, hold))
    await asyncio.sleep(0)
    assert started == ["mallory", "mallory", "alice"]  # alice's edit starts at once
    hold.set()
    await asyncio.gather(*flood, alice)
    assert fair.depths() == {}


async def test_interactive_requests_of_one_identity_do_not_starve_the_background_work_of_another():
    fair, order = FairShare(2, interactive_reserve=1), []
    holds = [asyncio.Event() for _ in range(6)]
    flood = [
        asyncio.ensure_future(holding(fair, "mallory", Priority.INTERACTIVE, order, holds[n], ("mallory", n)))
        for n in range(5)
    ]
    await asyncio.sleep(0)
    alice = asyncio.ensure_future(holding(fair, "alice", Priority.BACKGROUND, order, holds[5], ("alice", 5)))
    await asyncio.sleep(0)
    assert order == [("mallory", 0), ("mallory", 1)]
    holds[1].set()  # the slot her second request held frees: it goes to alice, who holds none
    await asyncio.sleep(0.01)
    assert order[2] == ("alice", 5)
    for hold in holds:
        hold.set()
    await asyncio.gather(*flood, alice)
    assert fair.depths() == {}


async def test_the_interactive_requests_of_one_person_still_go_before_their_own_background_ones():
    fair, order = FairShare(2, interactive_reserve=1), []
    first, hold = asyncio.Event(), asyncio.Event()
    workspace = [asyncio.ensure_future(holding(fair, "alice", Priority.BACKGROUND, order, first, "w0"))]
    workspace += [
        asyncio.ensure_future(holding(fair, "alice", Priority.BACKGROUND, order, hold, f"w{i}")) for i in range(1, 4)
    ]
    await asyncio.sleep(0)
    saved = [
        asyncio.ensure_future(holding(fair, "alice", Priority.INTERACTIVE, order, hold, f"s{i}")) for i in range(3)
    ]
    await asyncio.sleep(0)
    assert order == ["w0", "s0"]  # her edit takes the reserve at once
    first.set()
    hold.set()
    await asyncio.gather(*workspace, *saved)
    assert order[:4] == ["w0", "s0", "s1", "s2"]  # then her other edited units, before her own workspace audit
    assert fair.depths() == {}
