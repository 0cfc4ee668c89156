"""The tests' forked daemons (tests/support/zygote.py) are the daemon `backend.launch.spawn` starts from nothing:
the same ready line for the caller's environment and directory, a process group of their own, the same exit
status when stopped; and none outlives the pytest worker that asked for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend import launch
from backend.supervise import group_alive
from tests.support import zygote

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not zygote.USABLE, reason="daemons are forked on Linux only")


def test_a_forked_daemon_serves_and_ends_as_a_started_one(tiny_model, tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # the default endpoint follows the caller's environment
    ended = {}
    for kind, spawn in (("forked", zygote.spawn), ("started", launch.spawn)):
        with open(tmp_path / f"{kind}.log", "wb") as err:
            proc = spawn(["--model", str(tiny_model), "--trust-remote-code", "--no-store"], stderr=err, cwd=tmp_path)
        try:
            endpoint = launch.ready(proc, 180)
            assert endpoint.startswith(f"ipc://{runtime}/"), (kind, endpoint)
            assert os.getpgid(proc.pid) == proc.pid, kind  # its own group, which stop() ends with it
            assert Path(f"/proc/{proc.pid}/cwd").resolve() == tmp_path.resolve(), kind
        finally:
            ended[kind] = launch.stop(proc)
        assert proc.poll() == ended[kind] and proc.stdout.closed, kind
    assert ended["forked"] == ended["started"], ended


def test_the_daemons_of_a_worker_that_is_gone_are_ended(tiny_model, tmp_path):
    """A worker killed mid-test (its end of the control socket closed, no clean-up run): the zygote kills
    what it forked, and exits. (The daemon's stderr is a file: holding the worker's pipe, a daemon left running
    would keep this test waiting for the worker's output instead of failing.)"""
    worker = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "from tests.support import zygote\n"
            "from backend import launch\n"
            f"proc = zygote.spawn(['--model', {str(tiny_model)!r}, '--trust-remote-code', '--no-store',"
            f" '--bind', 'ipc://{tmp_path}/d.sock'], stderr=open({str(tmp_path / 'd.log')!r}, 'wb'))\n"
            "launch.ready(proc, 180)\n"
            "print(proc.pid, zygote._zygote.proc.pid, flush=True)\n"
            "os._exit(0)\n",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    daemon, zygote_pid = map(int, worker.stdout.split())  # each leads a process group of its own
    deadline = time.monotonic() + 30
    while (group_alive(daemon) or group_alive(zygote_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(daemon), f"the daemon {daemon} outlived its worker and zygote: {worker.stderr}"
    assert not group_alive(zygote_pid), f"the zygote {zygote_pid} outlived its worker: {worker.stderr}"
