"""The queue spread over daemons loses no unit: items in flight on a daemon that fails go back to the queue,
to the other daemons or, when none is left, to whoever runs the next spread (the language server's next
daemon)."""

from __future__ import annotations

import asyncio

from k3lsp.auditor import BackendUnavailable
from k3lsp.spread import Spread


async def test_items_in_flight_on_a_failing_daemon_are_all_left_for_the_next_one():
    started = []

    async def work(endpoint: str, _auditor, item: int) -> None:
        started.append(item)
        if item == 3:  # one request sees the daemon fail; the others are still waiting for their answers
            raise BackendUnavailable("down", f"{endpoint} stopped answering")
        await asyncio.Event().wait()

    spread = Spread(list(range(6)), work)
    await asyncio.wait_for(spread.run({"a": object()}, jobs=4), 10)
    assert started == [0, 1, 2, 3]
    assert sorted(spread.left()) == list(range(6)) and spread.pending == 6
    assert spread.failure is not None and spread.live == set()


async def test_another_daemon_finishes_what_a_failed_one_held():
    done = []

    async def work(endpoint: str, _auditor, item: int) -> None:
        await asyncio.sleep(0)
        if endpoint == "a":
            raise BackendUnavailable("down", "a stopped answering")
        done.append(item)

    drops = []
    spread = Spread(list(range(8)), work, on_drop=lambda e, why, live: drops.append((e, sorted(live))))
    await spread.run({"a": object(), "b": object()}, jobs=2)
    assert sorted(done) == list(range(8)) and spread.pending == 0 and spread.left() == []
    assert drops == [("a", ["b"])]
