"""A ROUTER on loopback playing a scripted daemon, for tests of the client side's handling of odd answers
(the real daemon is in tests/backend)."""

from __future__ import annotations

import asyncio
import contextlib

import zmq
import zmq.asyncio

from k3lsp import protocol


@contextlib.asynccontextmanager
async def peer(handler, *, sndhwm: int = 1000):
    """A ROUTER on a free loopback port; ``handler(sock, ident, message)`` answers each decoded message.
    A ROUTER drops what a peer's full queue cannot take: ``sndhwm=0`` (no limit) for floods that must arrive."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    async def serve():
        while True:
            ident, frame = await sock.recv_multipart()
            await handler(sock, ident, protocol.decode(frame, "to_daemon"))

    task = asyncio.create_task(serve())
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
        ctx.term()


async def reply(sock, ident, kind, msg_id, **fields):
    await sock.send_multipart([ident, protocol.encode(protocol.make(kind, msg_id, **fields))])


WELCOME = {"protocol": 1, "server": "test", "model": "m", "experts": 8, "ranks": 1, "limits": {}}
