"""No client chooses its routing id, so no connection can abort the daemon.

libzmq 4.3.5's ROUTER asserts (socket_base.cpp:2113, SIGABRT) when an id it generates for a client that
chose none equals an id another client chose, and the generated ids are predictable: they count up from
libc's ``rand()`` with its default seed. Against the real `k3-backend serve`, plain and CURVE (with an
authorised key): a normal client, clients claiming the next generated ids, then more normal clients. Every
one of them must be served and the daemon must live on.
"""

from __future__ import annotations

import struct

import pytest

from k3lsp.wire import keys
from tests.security.conftest import DAEMON_ARGS, script
from tests.support.daemon import Wire, serving

# The first ids a ROUTER generates when it is the process's 1st, 2nd or 3rd caller of libzmq's generate_random()
# (two rand() calls each, default seed): the daemon's ROUTER is one of the first sockets it creates.
FIRST_GENERATED = (0x6B8B4567, 0xE43C9869, 0xF4B0DC51)
CRAFTED = [b"\x00" + struct.pack(">I", first + k) for first in FIRST_GENERATED for k in range(1, 9)]


async def collide(endpoint: str, **curve) -> list[str]:
    """Connect a normal client, the crafted ones, then normal ones; each pings once. Returns what each got."""
    wires = [Wire(endpoint, timeout=5, **curve)]
    wires += [Wire(endpoint, timeout=5, routing_id=rid, **curve) for rid in CRAFTED]
    wires += [Wire(endpoint, timeout=5, **curve) for _ in range(8)]
    answers = []
    try:
        for i, wire in enumerate(wires):
            try:
                answers.append((await wire.ask("ping", f"p{i}"))["kind"])
            except TimeoutError:
                answers.append("timeout")
    finally:
        for wire in wires:
            wire.close()
    return answers


@pytest.fixture(params=["ipc", "tcp"])
def plain_daemon(tiny_model, request):
    """The default private ipc socket, and a plain tcp socket on loopback (--insecure)."""
    tcp = request.param == "tcp"
    with serving(
        tiny_model,
        script=script(),
        args=[*DAEMON_ARGS, *(["--insecure"] if tcp else [])],
        bind="tcp://127.0.0.1:0" if tcp else None,
    ) as d:
        yield d


@pytest.fixture
def curve_only_daemon(tiny_model, keyring):
    args = [*DAEMON_ARGS, "--server-key", str(keyring.server_secret), "--authorized-keys", str(keyring.authorized)]
    with serving(tiny_model, script=script(), args=args) as d:
        yield d


async def test_clients_claiming_generated_routing_ids_do_not_abort_a_plain_daemon(plain_daemon):
    answers = await collide(plain_daemon.endpoint)
    assert plain_daemon.proc.poll() is None, plain_daemon.log_text()[-2000:]
    assert answers == ["pong"] * len(answers)


async def test_an_authorised_key_claiming_generated_routing_ids_does_not_abort_a_curve_daemon(
    curve_only_daemon, keyring
):
    public, secret = keys.load_secret(keyring.clients["alice"][1])
    answers = await collide(curve_only_daemon.endpoint, curve=(keys.load_public(keyring.server_public), public, secret))
    assert curve_only_daemon.proc.poll() is None, curve_only_daemon.log_text()[-2000:]
    assert answers == ["pong"] * len(answers)
