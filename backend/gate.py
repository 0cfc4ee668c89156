"""Who may connect to the daemon's socket, and under which routing id: the socket's ZAP handler.

Every handshake on the daemon's ROUTER, plain or CURVE, goes through this handler (``zap_domain`` is set
and enforced on both). It refuses a CURVE key that is not in the allow-list, and on an ``ipc://`` socket a
peer whose user id (SO_PEERCRED / LOCAL_PEERCRED, which libzmq appends to the ZAP address) is not the
daemon's. Where libzmq was built without peer credentials (its macOS build does not detect
LOCAL_PEERCRED) the address carries no uid, and the socket's private directory alone keeps others out.
It answers with a User-Id (the z85 key, ``uid:N`` on ipc, ``addr:IP`` on plain tcp): the identity that
request caps and ownership follow.

It also names every connection itself. libzmq 4.3.5 aborts the whole process (socket_base.cpp:2113) when a
routing id it generates for a client that chose none equals one another client chose, and generated ids
are predictable; the ZAP request does not carry the client's chosen id, so it cannot be refused here.
But a ZAP reply may carry metadata, and an ``Identity`` property in it sets the peer's routing id just as
the client's own handshake metadata does (mechanism.cpp ``parse_metadata``): whichever is parsed last
wins. With CURVE the client's metadata is parsed in the same io-thread step that sends the ZAP request
(curve_server.cpp ``process_initiate``); the reply is only held back until the io thread has finished that
step, which a message through a socket served by the same (single) io thread proves. Then every connection
gets the gate's id: a random per-daemon prefix and a counter, never starting with a zero byte, so libzmq
never generates an id and no two ids collide. With the NULL mechanism (plain sockets) the client's READY
may arrive after the reply; a normal client sends it at once, so the reply also waits NULL_SETTLE, and a
hand-written client that holds its READY back keeps an id of its own choosing, which the daemon then
refuses to serve (``names``). That is one reason a plain tcp socket needs ``--insecure``; on the default
ipc socket only the daemon's own user can connect at all.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import struct
import tempfile
from pathlib import Path

import zmq
import zmq.asyncio
from zmq.utils import z85

from backend.allowlist import AllowList

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq sends the ZAP requests of every socket of a context
ZAP_DOMAIN = "k3audit"
NULL_SETTLE = 0.02  # seconds a plain handshake's reply waits for the client's READY (sent at once by libzmq)


def metadata(**properties: bytes) -> bytes:
    """ZMTP metadata: a name of one length byte, then a value with a 4-byte big-endian length."""
    return b"".join(bytes([len(k)]) + k.encode() + struct.pack(">I", len(v)) + v for k, v in properties.items())


def peer_uid(address: bytes) -> int | None:
    """The user id libzmq appended to an ipc peer's address (``host:uid:gid:pid``, macOS ``host:uid:gid:``)."""
    parts = address.decode("ascii", "replace").rsplit(":", 3)
    return int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else None


class Gate:
    """The ZAP handler of one context's daemon socket; ``stop()`` it when the socket closes."""

    def __init__(self, ctx: zmq.asyncio.Context, *, allow: AllowList | None, local_uid: int | None):
        """``allow``: the CURVE allow-list (None for a plain socket); ``local_uid``: on an ipc socket, the only
        user id that may connect."""
        if ctx.get(zmq.IO_THREADS) != 1:  # the io-thread barrier below needs all engines on one thread
            raise ValueError("the daemon's context must have exactly one io thread")
        self.allow = allow
        self.local_uid = local_uid
        self._prefix = b"\x01" + os.urandom(11)  # not guessable by clients: they never see routing ids
        self._ids = itertools.count(1)
        self._dir = Path(tempfile.mkdtemp(prefix="k3gate-"))  # 0700: the barrier's private socket
        self._zap = ctx.socket(zmq.ROUTER)  # a REP in effect, but replies may leave in batches
        self._ping = ctx.socket(zmq.PAIR)
        self._pong = ctx.socket(zmq.PAIR)
        self._task: asyncio.Task | None = None
        try:
            for sock in (self._zap, self._ping, self._pong):
                sock.setsockopt(zmq.LINGER, 0)
            self._zap.bind(ZAP_ENDPOINT)
            self._ping.bind(f"ipc://{self._dir}/io")
            self._pong.connect(f"ipc://{self._dir}/io")
            self._task = asyncio.get_running_loop().create_task(self._serve(), name="k3-gate")
        except BaseException:
            self.stop()
            raise

    def names(self, route: bytes) -> bool:
        """Whether a routing id is one the gate gave (a client that kept its own id is not served)."""
        return route.startswith(self._prefix)

    def allows(self, user: str) -> bool:
        """Whether an authenticated User-Id may still be served (a deleted key no longer is)."""
        return self.allow is None or self.allow.allows(user)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for sock in (self._zap, self._ping, self._pong):
            sock.close(0)
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _serve(self) -> None:
        while True:
            batch = [await self._zap.recv_multipart()]
            while self._zap.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                batch.append(await self._zap.recv_multipart())
            # The io thread sent these requests while handling the handshakes; once a message has crossed
            # it, those handlers have returned, so the client metadata they parsed comes before our reply.
            await self._ping.send(b"")
            await self._pong.recv()
            if any(request[7:8] == [b"NULL"] for request in batch):
                await asyncio.sleep(NULL_SETTLE)
            for request in batch:
                await self._zap.send_multipart(self._reply(request))

    def _reply(self, request: list[bytes]) -> list[bytes]:
        """[envelope, version, request id, status, text, user id, metadata] for one ZAP request."""
        envelope, request_id = request[:2], request[3:4] or [b""]
        try:
            user, refusal = self._decide(request[2:])
        except Exception:  # never end the handler: every later handshake would hang unanswered
            log.exception("checking a connection failed: refused")
            user, refusal = "", "internal error"
        if refusal:
            log.warning("refused a connection: %s", refusal)
            return [*envelope, b"1.0", *request_id, b"400", refusal.encode()[:200], b"", b""]
        routing_id = self._prefix + struct.pack(">Q", next(self._ids))
        return [*envelope, b"1.0", *request_id, b"200", b"OK", user.encode(), metadata(Identity=routing_id)]

    def _decide(self, frames: list[bytes]) -> tuple[str, str]:
        """(User-Id, "") for a connection that may proceed, ("", why) for one that may not."""
        version, _, domain, address, _, mechanism, *credentials = frames
        if version != b"1.0" or domain != ZAP_DOMAIN.encode():
            return "", f"unexpected ZAP version {version!r} or domain {domain!r}"
        if self.local_uid is not None:
            uid = peer_uid(address)
            if uid is not None and uid != self.local_uid:
                return "", f"user id {uid} is not the daemon's ({self.local_uid}) on its local socket"
        if mechanism == b"CURVE" and self.allow is not None and len(credentials) == 1:
            key = z85.encode(credentials[0]).decode()
            return (key, "") if self.allow.allows(key) else ("", f"key {key} is not in {self.allow.directory}")
        if mechanism == b"NULL" and self.allow is None:
            user = f"uid:{self.local_uid}" if self.local_uid is not None else f"addr:{address.decode(errors='replace')}"
            return user, ""
        return "", f"mechanism {mechanism.decode(errors='replace')} is not accepted here"
