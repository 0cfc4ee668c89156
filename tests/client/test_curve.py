"""CurveZMQ end to end on loopback: backend.auth on a real ROUTER, k3lsp.core.client with keys, each refusal named.

The daemon's own socket uses the same ``secure_router``; tests/security covers it with the real daemon process.
"""

import asyncio
import contextlib
import socket
import stat
import threading
import time

import pytest
import zmq
import zmq.asyncio

from backend.auth import Security, secure_router
from k3lsp.core.client import ClientOptions, DaemonClient, DaemonError
from k3lsp.wire import keys, protocol

# the first 32 of the 64 bytes of a ZMTP 3.0 greeting (signature, version, mechanism): the rest never comes
GREETING_START = bytes([0xFF, *[0] * 8, 0x7F, 3, 0]) + b"CURVE".ljust(20, b"\0")


@pytest.fixture
def keyring(tmp_path):
    server = keys.init_keypair(tmp_path / "server", "server")
    good = keys.init_keypair(tmp_path / "clients", "good")
    bad = keys.init_keypair(tmp_path / "clients", "bad")
    other_server = keys.init_keypair(tmp_path / "other", "server")
    allowed = tmp_path / "authorized"
    allowed.mkdir()
    (allowed / "good.key").write_bytes(good[0].read_bytes())
    return {"server": server, "good": good, "bad": bad, "other_server": other_server, "allowed": allowed}


@contextlib.asynccontextmanager
async def curve_daemon(keyring):
    """A ROUTER secured exactly like the daemon's, answering hello and ping, recording each User-Id."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    curve = secure_router(
        sock, "tcp://127.0.0.1:0", Security(keyring["server"][1], keyring["allowed"], keys_reload_seconds=0)
    )
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    users = []

    async def serve():
        while True:
            ident, frame = await sock.recv_multipart(copy=False)
            users.append(frame.get("User-Id"))
            msg = protocol.decode(frame.bytes, "to_daemon")
            kind = {"hello": "welcome", "ping": "pong"}[msg["kind"]]
            fields = {"protocol": 1, "server": "t", "model": "m", "experts": 8, "ranks": 1, "limits": {}}
            reply = protocol.make(kind, msg["id"], **(fields if kind == "welcome" else {}))
            await sock.send_multipart([ident.bytes, protocol.encode(reply)])

    task = asyncio.create_task(serve())
    try:
        yield f"tcp://127.0.0.1:{port}", users, curve
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        curve.stop()
        sock.close()
        ctx.term()


async def connect(endpoint, server_key=None, client_key=None):
    client = DaemonClient(
        ClientOptions(
            endpoint=endpoint,
            server_key=server_key,
            client_key=client_key,
            connect_timeout=3.0,
            insecure=not (server_key or client_key),
        )
    )
    try:
        return await asyncio.wait_for(client.connect(), 10)
    finally:
        await client.close()


def test_secret_keys_are_private(keyring):
    public, secret = keyring["good"]
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert keys.load_public(public) == keys.load_secret(secret)[0]
    secret.chmod(0o644)
    with pytest.raises(keys.KeyFileError, match="readable by others"):
        keys.load_secret(secret)


async def test_authorised_client_works_and_is_identified(keyring):
    async with curve_daemon(keyring) as (endpoint, users, _):
        welcome = await connect(endpoint, keyring["server"][0], keyring["good"][1])
    assert welcome["kind"] == "welcome"
    assert users == [keys.load_public(keyring["good"][0]).decode()]


@pytest.mark.parametrize(
    ("server", "client", "code"),
    [("server", "bad", "unauthorized"), ("other_server", "good", "server_key"), (None, None, "security_mismatch")],
    ids=["unauthorised key", "wrong server key", "plain client"],
)
async def test_refusals_are_told_apart_while_the_good_client_keeps_working(keyring, server, client, code):
    async with curve_daemon(keyring) as (endpoint, _, _):
        with pytest.raises(DaemonError) as err:
            await connect(endpoint, server and keyring[server][0], client and keyring[client][1])
        assert err.value.code == code
        assert endpoint in str(err.value)
        assert (await connect(endpoint, keyring["server"][0], keyring["good"][1]))["kind"] == "welcome"


async def test_allow_list_reloads_without_restart(keyring):
    async with curve_daemon(keyring) as (endpoint, _, curve):
        with pytest.raises(DaemonError):
            await connect(endpoint, keyring["server"][0], keyring["bad"][1])
        (keyring["allowed"] / "bad.key").write_bytes(keyring["bad"][0].read_bytes())
        assert (await connect(endpoint, keyring["server"][0], keyring["bad"][1]))["kind"] == "welcome"
        (keyring["allowed"] / "bad.key").unlink()
        assert not curve.allow.allows(keys.load_public(keyring["bad"][0]))


async def test_a_plain_client_cut_off_during_the_handshake_is_not_told_its_server_key_is_wrong(tmp_path):
    """libzmq reports a connection closed before the server's greeting names its mechanism as a handshake failure
    without detail, what a Curve client gets for a wrong server key; a Curve daemon under load closed a plain
    client's connection that early, and the client said its (absent) server key was wrong."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def close_mid_greeting() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.sendall(GREETING_START)
                time.sleep(0.2)

    threading.Thread(target=close_mid_greeting, daemon=True).start()
    try:
        with pytest.raises(DaemonError) as err:
            await connect(f"tcp://127.0.0.1:{port}", None, None)
    finally:
        listener.close()
    assert err.value.code == "security_mismatch", err.value
