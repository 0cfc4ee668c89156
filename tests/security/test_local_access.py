"""Other users of the machine: by default they can neither reach the daemon nor pose as it, and the client checks
who the daemon is before it sends any code. One user's requests are capped as a whole, not per connection, and
a client that goes away takes its requests with it.

A second local user is a child process of this test that drops to uid 65534 (``nobody``): tests run as root
here; elsewhere those tests are skipped, with that reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import zmq

from backend import launch
from k3lsp.core import options
from k3lsp.core.client import ClientOptions, DaemonClient, DaemonError
from k3lsp.wire import local, protocol
from tests.security.conftest import LONG, script
from tests.support.daemon import REPO, Wire, audit_fields, module_daemon
from tests.support.pair import free_port_block

NOBODY = 65534


class OtherUser:
    """``fn(*args)`` run in a forked child as uid/gid 65534; its JSON-able result comes back through a pipe.

    Forked, not exec'd: this machine's Python lives where uid 65534 may not read, so everything the child
    needs is imported here first.
    """

    def __init__(self, fn, *args):
        if os.geteuid() != 0:
            pytest.skip("acting as a second local user needs root (the child drops to uid 65534)")
        self._read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into pytest
            try:
                os.close(self._read)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                out = json.dumps({"result": fn(*args)})
            except BaseException as exc:
                out = json.dumps({"error": repr(exc)})
            os.write(write, out.encode())
            os._exit(0)
        os.close(write)

    def result(self, timeout: float = 30.0):
        chunks, deadline = [], time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0 and select.select([self._read], [], [], left)[0]:
                chunk = os.read(self._read, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            else:
                raise AssertionError(f"the other user's process did not finish within {timeout} s")
        finally:
            os.close(self._read)
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        answer = json.loads(b"".join(chunks))
        assert "error" not in answer, answer["error"]
        return answer["result"]


def try_ping(endpoint: str, seconds: float = 3.0) -> str:
    """A raw DEALER (any client library would do the same): what the daemon answered to a ping, or 'no answer'."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send(protocol.encode(protocol.make("ping", "p")))
        if sock.poll(seconds * 1000):
            return protocol.decode(sock.recv(), "to_client")["kind"]
        return "no answer"
    finally:
        sock.close(0)
        ctx.term()


def impostor(endpoints: list[str], seconds: float) -> list[str]:
    """A fake daemon: binds each endpoint and returns every frame clients sent it within ``seconds``."""
    ctx = zmq.Context()
    socks = []
    for endpoint in endpoints:
        if endpoint.startswith("ipc://"):
            Path(endpoint[6:]).parent.mkdir(mode=0o700, exist_ok=True)
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(endpoint)
        socks.append(sock)
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    received, deadline = [], time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for sock, _ in poller.poll(left * 1000):
            received.append(sock.recv_multipart()[-1].decode(errors="replace"))
    for sock in socks:
        sock.close(0)
    ctx.term()
    return received


daemon = module_daemon(script, ["--max-tokens", "6000", "--max-open-per-client", "4"])


# --- the default endpoint --------------------------------------------------------------------------------------


def test_daemon_and_clients_default_to_one_private_ipc_socket(tiny_model, tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("K3LSP_ENDPOINT", raising=False)
    default = f"ipc://{runtime}/k3lsp/daemon.sock"
    assert local.default_endpoint() == default
    assert options.Options().endpoint == default and ClientOptions().endpoint == default

    src = tmp_path / "ok.c"
    src.write_text("int ok(int n)\n{\n\treturn n;\n}\n")
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script()))
    proc, endpoint = launch.start(
        ["--model", str(tiny_model), "--script", str(script_file), "--trust-remote-code"],
        cwd=REPO,
        stderr=subprocess.DEVNULL,
    )  # no --bind
    try:
        assert endpoint == default
        assert stat.S_IMODE((runtime / "k3lsp").stat().st_mode) == 0o700
        env = os.environ | {"K3LSP_CACHE_DIR": str(tmp_path / "cache")}
        k3lsp = [sys.executable, "-m", "k3lsp.cli"]
        status = subprocess.run([*k3lsp, "status", "--json"], capture_output=True, text=True, env=env, timeout=60)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["endpoint"] == default
        audit = subprocess.run([*k3lsp, "audit", str(src)], capture_output=True, text=True, env=env, timeout=120)
        assert audit.returncode == 0 and "1 audited" in audit.stdout, audit.stdout + audit.stderr
    finally:
        launch.stop(proc)


# --- another user cannot connect ---------------------------------------------------------------------------------


def test_another_user_can_neither_reach_the_socket_nor_pass_the_gate(daemon):
    assert try_ping(daemon.endpoint) == "pong"  # the daemon's own user
    assert OtherUser(try_ping, daemon.endpoint).result() == "no answer"  # cannot enter the directory

    # Even with the directory and the socket opened up to everyone, the gate checks the peer's uid.
    path = Path(daemon.endpoint.removeprefix("ipc://"))
    modes = stat.S_IMODE(path.parent.stat().st_mode), stat.S_IMODE(path.stat().st_mode)
    path.parent.chmod(0o711)
    path.chmod(0o777)
    try:
        assert OtherUser(try_ping, daemon.endpoint).result() == "no answer"
    finally:
        path.parent.chmod(modes[0])
        path.chmod(modes[1])
    assert f"user id {NOBODY} is not the daemon's" in daemon.log_text()
    assert try_ping(daemon.endpoint) == "pong"


# --- nobody can pose as the daemon ----------------------------------------------------------------------------


@pytest.fixture
def shared_tmp():
    """A directory other users can enter (pytest's own temporary directories are private to root)."""
    base = Path(tempfile.mkdtemp())
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


async def test_a_daemon_of_another_user_gets_nothing_from_the_client(shared_tmp, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("acting as a second local user needs root (the child drops to uid 65534)")
    squatted = shared_tmp / "run"  # e.g. /tmp/runtime-<uid> taken by someone else before the user's first login
    squatted.mkdir(mode=0o700)
    os.chown(squatted, NOBODY, NOBODY)
    ipc, tcp = f"ipc://{squatted}/k3lsp/daemon.sock", f"tcp://127.0.0.1:{free_port_block(1)}"
    fake = OtherUser(impostor, [ipc, tcp], 6.0)
    await asyncio.sleep(1.0)  # the fake daemon is listening
    refusals = {}
    for endpoint in (ipc, tcp):
        client = DaemonClient(ClientOptions(endpoint=endpoint, connect_timeout=2.0))
        with pytest.raises(DaemonError) as err:
            await client.connect()
        await client.close()
        refusals[endpoint] = err.value
    audit = subprocess.run(
        [sys.executable, "-m", "k3lsp.cli", "audit", str(REPO / "examples"), "--endpoint", ipc],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"K3LSP_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert fake.result() == []  # not a byte of code, not even a hello
    assert refusals[ipc].code == "insecure" and f"belongs to uid {NOBODY}" in str(refusals[ipc])
    assert refusals[tcp].code == "insecure" and "plain tcp" in str(refusals[tcp])
    assert audit.returncode == 2 and f"belongs to uid {NOBODY}" in audit.stdout + audit.stderr


def test_serve_refuses_a_socket_directory_others_could_enter_or_own(tiny_model, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "serve",
            "--model",
            str(tiny_model),
            "--bind",
            f"ipc://{shared}/daemon.sock",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "may be entered by others (mode 755)" in done.stderr
    plain = subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", "--model", str(tiny_model), "--bind", "tcp://127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 2 and "--insecure" in plain.stderr


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ("open", "may be entered by others"),
        ("foreign", f"belongs to uid {NOBODY}"),
        ("writable parent", "writable by others without the sticky bit"),
        ("file", "is not a socket"),
    ],
)
def test_the_socket_directory_must_be_this_users_alone(tmp_path, layout, why):
    parent = tmp_path / "parent"
    parent.mkdir()
    directory = parent / "k3lsp"
    directory.mkdir(mode=0o700)
    endpoint = f"ipc://{directory}/daemon.sock"
    if layout == "open":
        directory.chmod(0o755)
    elif layout == "foreign":
        if os.geteuid() != 0:
            pytest.skip("needs root to make a directory of another user")
        os.chown(directory, NOBODY, NOBODY)
    elif layout == "writable parent":
        parent.chmod(0o777)  # anyone could rename k3lsp/ away and put their own in its place
    else:
        (directory / "daemon.sock").write_text("not a socket")
    with pytest.raises(local.LocalSocketError, match=why):
        local.private_socket(endpoint)


def test_a_missing_socket_directory_is_created_private_and_a_sticky_parent_is_fine(tmp_path):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp
    path = local.private_socket(f"ipc://{sticky}/runtime-0/k3lsp/daemon.sock")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    with pytest.raises(local.LocalSocketError, match="absolute path"):
        local.private_socket("ipc://relative/daemon.sock")


# --- caps and vanished clients ---------------------------------------------------------------------------------


async def test_open_requests_are_capped_per_user_not_per_connection(daemon):
    wires = [Wire(daemon.endpoint, timeout=30) for _ in range(3)]  # --max-open-per-client 4
    try:
        answers = []
        for n, wire in enumerate(wires):
            for i in range(4):
                await wire.send("audit", f"c{n}-{i}", **audit_fields("holder"))
        for n, wire in enumerate(wires):
            for i in range(4):
                first = await wire.next_for(f"c{n}-{i}")
                while first["kind"] == "progress":
                    first = await wire.next_for(f"c{n}-{i}")
                answers.append((first["kind"], first.get("code")))
        assert answers.count(("tool_request", None)) == 4, answers
        assert answers.count(("error", "busy")) == 8, answers
    finally:
        for wire in wires:
            wire.close()


async def test_the_requests_of_a_vanished_client_stop_in_the_engine_at_once(daemon):
    async with Wire(daemon.endpoint, timeout=30) as watcher:
        gone = Wire(daemon.endpoint, timeout=30)
        for i in range(3):
            await gone.send("audit", f"long{i}", **audit_fields("long", code=LONG))
        for i in range(3):
            await gone.until(f"long{i}", "progress")
        status = (await watcher.ask("status", "s0"))["status"]
        assert status["open_requests"] == 3
        gone.close()  # the editor process ends: its connection closes with its requests open
        start = time.monotonic()
        for n in range(100):
            status = (await watcher.ask("status", f"s{n + 1}"))["status"]
            if status["open_requests"] == 0 and status["active"] == 0 and status["queued"] == 0:
                break
            await asyncio.sleep(0.1)
        assert status["open_requests"] == 0 and status["active"] == 0 and status["queued"] == 0, status
        assert time.monotonic() - start < 5.0
