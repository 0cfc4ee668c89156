"""DaemonClient against a real ROUTER on loopback playing a scripted daemon (the real one is in tests/backend)."""

import asyncio
import socket

import pytest
import zmq

from k3lsp.core.client import ClientOptions, DaemonClient, DaemonError
from tests.support.peer import WELCOME, peer, reply


async def basic(sock, ident, msg):
    if msg["kind"] == "hello":
        await reply(sock, ident, "welcome", msg["id"], **WELCOME)
    elif msg["kind"] == "ping":
        await reply(sock, ident, "pong", msg["id"])
    elif msg["kind"] == "audit":
        # Two interleaved requests stream back on one socket: answer in reverse order to prove routing by id.
        await asyncio.sleep(0.05 if msg["unit"] == "first" else 0)
        await reply(sock, ident, "progress", msg["id"], stage="decode", detail=msg["unit"])
        await reply(sock, ident, "tool_request", msg["id"], call="c1", tool="read_lines", args={"path": "a.c"})
    elif msg["kind"] == "tool_result":
        await reply(sock, ident, "text", msg["id"], text=msg["result"])
        await reply(sock, ident, "done", msg["id"], stats={"ok": msg["ok"]})


AUDIT = {"path": "a.c", "code": "int f(void);", "context": ""}


async def test_concurrent_streams_are_routed_by_id_and_tools_answered():
    async def tools(request):
        return True, f"lines of {request['args']['path']}"

    async with peer(basic) as endpoint, DaemonClient(ClientOptions(endpoint=endpoint)) as client:
        assert client.welcome["experts"] == 8

        async def run(unit):
            return [m async for m in client.stream("audit", AUDIT | {"unit": unit}, tools=tools)]

        first, second = await asyncio.wait_for(asyncio.gather(run("first"), run("second")), 10)
    for messages, unit in ((first, "first"), (second, "second")):
        assert [m["kind"] for m in messages] == ["progress", "tool_request", "text", "done"]
        assert messages[0]["detail"] == unit
        assert messages[2]["text"] == "lines of a.c"
        assert len({m["id"] for m in messages}) == 1


async def test_unreachable_daemon_is_a_clear_error():
    with socket.socket() as probe:  # closed synchronously (a zmq socket's listener lingers in its I/O thread,
        probe.bind(("127.0.0.1", 0))  # and a handshake with it failed as "server_key" now and then)
        port = probe.getsockname()[1]
    client = DaemonClient(ClientOptions(endpoint=f"tcp://127.0.0.1:{port}", connect_timeout=0.5, insecure=True))
    with pytest.raises(DaemonError) as err:
        await asyncio.wait_for(client.connect(), 5)
    await client.close()
    assert err.value.code == "unreachable"
    assert f"127.0.0.1:{port}" in str(err.value)


async def test_version_mismatch_is_named():
    async def old(sock, ident, msg):
        await reply(sock, ident, "welcome", msg["id"], **(WELCOME | {"protocol": 0}))

    async with peer(old) as endpoint:
        client = DaemonClient(ClientOptions(endpoint=endpoint))
        with pytest.raises(DaemonError) as err:
            await asyncio.wait_for(client.connect(), 5)
        await client.close()
    assert err.value.code == "version"


async def test_daemon_that_goes_silent_fails_open_requests():
    silent = asyncio.Event()

    async def goes_silent(sock, ident, msg):
        if not silent.is_set() and msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)
            silent.set()

    opts = ClientOptions(liveness_interval=0.2, liveness_timeout=0.6)
    async with peer(goes_silent) as endpoint:
        opts.endpoint = endpoint
        async with DaemonClient(opts) as client:
            messages = [m async for m in client.stream("audit", AUDIT | {"unit": "f"})]
    assert messages[-1]["kind"] == "error" and messages[-1]["code"] == "down"


async def test_leaving_a_stream_early_cancels_it_on_the_daemon():
    seen = []

    async def record(sock, ident, msg):
        seen.append(msg["kind"])
        await basic(sock, ident, msg)

    async with peer(record) as endpoint, DaemonClient(ClientOptions(endpoint=endpoint)) as client:
        gen = client.stream("audit", AUDIT | {"unit": "second"})
        first = await asyncio.wait_for(anext(gen), 5)
        await gen.aclose()
        for _ in range(50):
            if "cancel" in seen:
                break
            await asyncio.sleep(0.02)
    assert first["kind"] == "progress"
    assert "cancel" in seen


async def test_close_does_not_raise_when_a_background_task_died():
    async def welcome_only(sock, ident, msg):
        if msg["kind"] == "hello":
            await reply(sock, ident, "welcome", msg["id"], **WELCOME)

    opts = ClientOptions(liveness_interval=0.1, liveness_timeout=60)
    async with peer(welcome_only) as endpoint:
        opts.endpoint = endpoint
        client = DaemonClient(opts)
        await asyncio.wait_for(client.connect(), 5)
        request = asyncio.ensure_future(anext(client.stream("audit", AUDIT | {"unit": "f"})))  # an open request
        for _ in range(100):  # until the request is sent (bounded)
            if client._queues:
                break
            await asyncio.sleep(0.01)
        watchdog = client._watchdog
        client._sock.close(linger=0)  # the watchdog's next ping fails with ZMQError (socket closed)
        await asyncio.wait_for(asyncio.wait([watchdog]), 5)
        assert isinstance(watchdog.exception(), zmq.ZMQError)
        await asyncio.wait_for(client.close(), 5)  # re-raised the watchdog's ZMQError before
        assert (await asyncio.wait_for(request, 5))["code"] == "down"  # the open request still ends
    assert client._sock is None and client._watchdog is None
