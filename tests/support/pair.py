"""Two ranks on 127.0.0.1 under a real `k3-launch --backend ring` (hostfiles/local-pair.json): mlx.launch, without
its busy loops (backend/launcher.py).

`launched(cmd)` starts the launcher with `--starting-port` set to free ports (so parallel runs don't collide on
the default 32323), waits (bounded) for the serve ready line on its stdout, and at the end stops the ranks it
started by PID: SIGTERM to rank 0, which stops the pair; SIGKILL whatever is left. The launcher's stdin is
a pipe kept open (mlx.launch's input loop would spin on a stdin at EOF; k3-launch replaces its own anyway).

`mlx.launch` exits 0 whatever its ranks return, so callers read `rank_pids()` and the rank-tagged log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.launch import wait_ready

REPO = Path(__file__).resolve().parents[2]
LOCAL_PAIR = REPO / "hostfiles" / "local-pair.json"
LAUNCH = str(Path(sys.executable).parent / "k3-launch")  # mlx.launch without its busy loops (backend/launcher.py)


def free_port_block(n: int = 2, tries: int = 50) -> int:
    """A first port p such that p..p+n-1 are all free on 127.0.0.1 now (the launcher counts up from p)."""
    for _ in range(tries):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + n > 65535:
            continue
        socks = []
        try:
            for port in range(first, first + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no block of free ports")


def launch_command(args: list[str], hostfile: Path = LOCAL_PAIR, launcher: str = LAUNCH) -> list[str]:
    """`k3-launch --backend ring --hostfile H --starting-port P -- python -m backend.cli ARGS` (or another
    launcher taking mlx.launch's arguments)."""
    return [
        launcher,
        "--backend",
        "ring",
        "--hostfile",
        str(hostfile),
        "--starting-port",
        str(free_port_block()),
        "--",
        sys.executable,
        "-m",
        "backend.cli",
        *args,
    ]


@dataclass
class Pair:
    launcher: subprocess.Popen
    endpoint: str
    log: Path  # the launcher's stderr: every rank's log lines, tagged [rank N/2]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def rank_pids(self) -> dict[int, int]:
        """MLX_RANK -> PID of the launcher's children (the ranks: the launcher's shell exec's them)."""
        return rank_pids(self.launcher.pid)


def rank_pids(launcher: int) -> dict[int, int]:
    pids = {}
    for task in Path(f"/proc/{launcher}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                    for item in env:
                        if item.startswith(b"MLX_RANK="):
                            pids[int(item[9:])] = int(child)
    return pids


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, waiting for the launcher to reap it, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@contextlib.contextmanager
def launched(serve_args: list[str], *, ready_timeout: float = 240.0) -> Iterator[Pair]:
    """`k3-backend serve --bind ipc://PRIVATE/daemon.sock --trust-remote-code *serve_args` on two ring ranks for
    the block (the tiny checkpoint's tokenizer class is this repository's code)."""
    with tempfile.TemporaryDirectory(prefix="k3pair-") as tmp:
        log = Path(tmp) / "launcher.log"
        cmd = launch_command(["serve", "--bind", f"ipc://{tmp}/daemon.sock", "--trust-remote-code", *serve_args])
        with open(log, "wb") as err:
            launcher = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=REPO,
                env=os.environ | {"PYTHONUNBUFFERED": "1"},
                text=True,
            )
        pids: dict[int, int] = {}
        try:
            endpoint = _ready(launcher, ready_timeout, log)
            pids = rank_pids(launcher.pid)
            yield Pair(launcher, endpoint, log)
        finally:
            _stop(launcher, pids or rank_pids(launcher.pid))


def _ready(launcher: subprocess.Popen, timeout: float, log: Path) -> str:
    endpoint, _ = wait_ready(launcher, timeout)
    if endpoint is None:
        raise RuntimeError(f"the pair was not ready within {timeout} s:\n{log.read_text()[-3000:]}")
    return endpoint


def _stop(launcher: subprocess.Popen, pids: dict[int, int]) -> None:
    """SIGTERM rank 0 (it stops the pair), then SIGKILL any rank still running; then the launcher."""
    if 0 in pids and alive(pids[0]):
        os.kill(pids[0], signal.SIGTERM)
    if not wait_gone(list(pids.values()), 30):
        for pid in pids.values():
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    try:
        launcher.wait(30)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait(10)
    for stream in (launcher.stdin, launcher.stdout):
        with contextlib.suppress(OSError):
            stream.close()
