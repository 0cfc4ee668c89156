"""A ROUTER on a private ipc socket playing a scripted daemon, for tests of the client side's handling of odd
answers (the real daemon is in tests/backend)."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile

import zmq
import zmq.asyncio

from k3lsp.wire import protocol


@contextlib.asynccontextmanager
async def peer(handler, *, sndhwm: int = 1000):
    """A ROUTER on an ipc socket in a fresh 0700 directory (where a client trusts it, like the daemon's default
    socket); ``handler(sock, ident, message)`` answers each decoded message. A ROUTER drops what a peer's full
    queue cannot take: ``sndhwm=0`` (no limit) for floods that must arrive whole."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    private = tempfile.TemporaryDirectory(prefix="k3peer-")
    endpoint = f"ipc://{private.name}/daemon.sock"
    sock.bind(endpoint)

    async def serve():
        while True:
            ident, frame = await sock.recv_multipart()
            await handler(sock, ident, protocol.decode(frame, "to_daemon"))

    task = asyncio.create_task(serve())
    try:
        yield endpoint
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
        ctx.term()
        private.cleanup()


async def reply(sock, ident, kind, msg_id, **fields):
    await sock.send_multipart([ident, protocol.encode(protocol.make(kind, msg_id, **fields))])


WELCOME = {"protocol": 1, "server": "test", "model": "m", "experts": 8, "ranks": 1, "limits": {}}
