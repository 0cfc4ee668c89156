"""One `k3-backend serve` per endpoint: a second one refuses at once and names the first, and a socket file
that nothing answers behind (a daemon killed by SIGKILL leaves one) is replaced, not refused.

libzmq's ipc bind unlinks whatever file has the socket's name, so a second serve on the same ipc endpoint used
to take it over silently: the first kept its ~0.75 TB of weights loaded and could no longer be reached.
"""

import asyncio
import os
import socket
import subprocess
import time
from pathlib import Path

from backend.launch import LISTENING, stop, wait_ready
from k3lsp.wire import isolated
from tests.support.daemon import REPO, Wire, serving

REFUSAL_TIMEOUT = 60.0  # a bound on the refusal, which comes before mlx is imported (about a second here)


def serve_command(model: Path, *args: str) -> list[str]:
    return isolated.python_command("backend.cli", "serve", "--model", str(model), "--no-store", "--trust-remote-code",
                                   *args)  # fmt: skip


def second_serve(model: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        serve_command(model, *args), capture_output=True, text=True, timeout=REFUSAL_TIMEOUT, cwd=REPO
    )


def answers(endpoint: str) -> bool:
    async def ping() -> bool:
        async with Wire(endpoint, timeout=30) as wire:
            return (await wire.ask("ping", "p1"))["kind"] == "pong"

    return asyncio.run(ping())


def test_a_second_serve_on_the_same_ipc_endpoint_refuses_and_names_the_first(tiny_model):
    with serving(tiny_model, until=LISTENING) as first:
        done = second_serve(tiny_model, "--bind", first.endpoint)
        assert done.returncode == 2, done.stderr
        assert f"{first.endpoint} is served by another k3-backend serve (pid {first.proc.pid})" in done.stderr
        assert "cannot load model" not in done.stderr  # refused before anything was loaded
        assert first.proc.poll() is None
        assert answers(first.endpoint)


def test_a_second_serve_on_the_same_tcp_port_refuses_and_names_the_first(tiny_model):
    with socket.socket() as probe:  # a port nobody listens on now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    with serving(tiny_model, bind=endpoint, args=["--insecure"], until=LISTENING) as first:
        done = second_serve(tiny_model, "--bind", endpoint, "--insecure")
        assert done.returncode == 2, done.stderr
        assert f"{endpoint} is served by another k3-backend serve (pid {first.proc.pid})" in done.stderr
        assert answers(first.endpoint)


def test_a_socket_file_with_nothing_behind_it_is_replaced(tiny_model, tmp_path):
    path = tmp_path / "run" / "daemon.sock"
    path.parent.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as dead:  # bound, never listening, closed: the file stays
        dead.bind(str(path))
    assert path.is_socket()
    with serving(tiny_model, bind=f"ipc://{path}", until=LISTENING) as daemon:
        assert answers(daemon.endpoint)


def test_a_socket_that_answers_without_a_daemons_lock_is_refused(tiny_model, tmp_path):
    """Something else listens on the socket (not a serve, which would hold the lock): it is not replaced."""
    path = tmp_path / "run" / "daemon.sock"
    path.parent.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        other.listen()
        done = second_serve(tiny_model, "--bind", f"ipc://{path}")
    assert done.returncode == 2, done.stderr
    mine = f" (pid {os.getpid()})" if hasattr(socket, "SO_PEERCRED") else ""  # the kernel names the listener
    assert f"ipc://{path} already answers{mine}, and not as a k3-backend serve of this user" in done.stderr
    assert path.is_socket()


def test_of_two_serves_started_at_once_one_serves_and_the_other_refuses(tiny_model, tmp_path):
    endpoint = f"ipc://{tmp_path}/run/daemon.sock"
    (tmp_path / "run").mkdir(mode=0o700)
    logs = [tmp_path / f"serve{i}.log" for i in range(2)]  # files, not pipes: a full pipe would stall a daemon
    procs = []
    for log in logs:
        with open(log, "wb") as err:
            procs.append(subprocess.Popen(serve_command(tiny_model, "--bind", endpoint), stdout=subprocess.PIPE,
                                          stderr=err, text=True, cwd=REPO))  # fmt: skip
    try:
        deadline = time.monotonic() + REFUSAL_TIMEOUT
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        (lost,) = [i for i, p in enumerate(procs) if p.poll() is not None]
        winner = procs[1 - lost]
        assert procs[lost].returncode == 2
        assert f"{endpoint} is served by another k3-backend serve (pid " in logs[lost].read_text()
        assert wait_ready(winner, REFUSAL_TIMEOUT, LISTENING)[0] == endpoint
        assert answers(endpoint)
    finally:
        for p in procs:
            stop(p)
