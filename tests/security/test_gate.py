"""The gate (the daemon socket's ZAP handler) on its own: it never raises into libzmq, reads the peer's uid from
the ZAP address, and secure_router leaves nothing running when it fails half-way."""

from __future__ import annotations

import pytest
import zmq
import zmq.asyncio

from backend import auth, gate
from backend.allowlist import AllowList
from k3lsp.wire import keys


def test_the_uid_of_an_ipc_peer_is_read_from_the_zap_address():
    assert gate.peer_uid(b"localhost:501:20:4711") == 501  # Linux: uid:gid:pid
    assert gate.peer_uid(b"localhost:501:20:") == 501  # macOS: uid:gid:
    assert gate.peer_uid(b"127.0.0.1") is None
    assert gate.peer_uid(b"") is None


async def test_a_failing_check_refuses_the_connection_instead_of_raising(tmp_path, monkeypatch):
    ctx = zmq.asyncio.Context()
    allow = AllowList(tmp_path)
    keeper = gate.Gate(ctx, allow=allow, local_uid=None)
    try:
        monkeypatch.setattr(allow, "allows", lambda key: 1 / 0)
        request = [b"1.0", b"7", gate.ZAP_DOMAIN.encode(), b"127.0.0.1", b"", b"CURVE", b"k" * 32]
        reply = keeper._reply([b"peer", b"", *request])
        assert reply[:5] == [b"peer", b"", b"1.0", b"7", b"400"]
        plain = keeper._reply([b"peer", b"", *request[:5], b"NULL"])  # a plain client to a CURVE socket
        assert plain[4] == b"400"
    finally:
        keeper.stop()
        ctx.term()


async def test_a_failure_after_the_gate_started_stops_it(tmp_path, monkeypatch):
    keys.init_server(tmp_path)
    security = auth.Security(server_secret=tmp_path / "server.key_secret", authorized_dir=tmp_path / "authorized")
    stopped = []
    real_stop = gate.Gate.stop
    monkeypatch.setattr(gate.Gate, "stop", lambda self: (stopped.append(self), real_stop(self)))
    monkeypatch.setattr(AllowList, "keys", lambda self: (_ for _ in ()).throw(RuntimeError("injected")))
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            auth.secure_router(sock, "tcp://127.0.0.1:0", security)
        assert len(stopped) == 1
        assert all(sock.closed for sock in (stopped[0]._zap, stopped[0]._ping, stopped[0]._pong))
    finally:
        sock.close(0)
        ctx.term()


async def test_on_a_local_socket_another_uid_is_refused_and_a_missing_one_left_to_the_directory():
    ctx = zmq.asyncio.Context()
    keeper = gate.Gate(ctx, allow=None, local_uid=501)
    try:

        def status(address: bytes) -> bytes:
            request = [b"1.0", b"1", gate.ZAP_DOMAIN.encode(), address, b"", b"NULL"]
            return keeper._reply([b"peer", b"", *request])[4]

        assert status(b"localhost:501:20:77") == b"200"
        assert status(b"localhost:502:20:78") == b"400"
        assert status(b"localhost") == b"200"  # no peer credentials in this libzmq build (macOS)
    finally:
        keeper.stop()
        ctx.term()
