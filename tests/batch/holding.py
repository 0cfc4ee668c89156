"""A scripted daemon that answers some units and holds the rest: a command caught mid-work, for the signal tests.

``holding(answered={"good": [finding]})`` runs a real ROUTER (tests/support/peer.py) on a private ipc socket in
a thread of the test process: it welcomes every client, answers an audit of a unit it names at once (its
findings, then ``done``), and never answers any other audit, nor ``status`` with ``hold_status``, until the
request is cancelled. ``held`` is set once a request is held: the command is working, and a signal reaches it
there. No model and no mlx: a signal test takes a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support.peer import WELCOME, peer, reply


@dataclass
class Holding:
    endpoint: str = ""
    held: threading.Event = field(default_factory=threading.Event)  # a request is being held
    cancelled: list[str] = field(default_factory=list)  # ids of the requests the client cancelled


@contextlib.contextmanager
def holding(
    answered: dict[str, list[dict]] | None = None, *, hold_status: bool = False, hold: bool = True
) -> Iterator[Holding]:
    """The daemon, for the ``with`` block; ``answered``: unit name -> the findings its audit reports; with
    ``hold`` False, every other unit is answered too, with no finding."""
    answered = answered or {}
    state = Holding()
    ready, done = threading.Event(), threading.Event()

    async def handler(sock, ident, msg):
        kind, msg_id = msg["kind"], msg["id"]
        if kind == "hello":
            await reply(sock, ident, "welcome", msg_id, **WELCOME)
        elif kind == "audit" and (msg["unit"] in answered or not hold):
            for finding in answered.get(msg["unit"], []):
                await reply(sock, ident, "finding", msg_id, finding=finding)
            await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})
        elif kind == "audit" or (kind == "status" and hold_status):
            state.held.set()
        elif kind == "status":
            await reply(sock, ident, "status", msg_id, status={"state": "ready", "requests": 0})
        elif kind == "cancel":
            state.cancelled.append(msg_id)
            await reply(sock, ident, "cancelled", msg_id)
        elif kind == "ping":
            await reply(sock, ident, "pong", msg_id)

    async def serve() -> None:
        async with peer(handler) as endpoint:
            state.endpoint = endpoint
            ready.set()
            while not done.is_set():
                await asyncio.sleep(0.05)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the holding daemon did not bind"
    try:
        yield state
    finally:
        done.set()
        thread.join(10)
