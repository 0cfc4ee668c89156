"""The tests' daemons forked from one Python per pytest worker (or bench script) that imported the daemon's code.

A daemon started from scratch spends about 2 CPU-s before it reads its arguments, importing mlx-lm, which
imports transformers (which reads the 3,344 files of its models folder at every import); the suite starts
hundreds, and the suite's time on 2 cores is CPU (issue 40). So ``spawn`` asks this worker's zygote, a
``python -I -u`` that imported ``backend.cli``, mlx and ``backend.serve`` once, to fork: the child takes the
caller's stdout pipe, stderr, working directory and environment, leads a process group of its own, and runs
``backend.cli.main(["serve", ...])`` as ``python -m backend.cli`` would, to its normal interpreter exit. It is the
same daemon code from its arguments on; what a test of the process itself needs (its command line, its start
from nothing, a signal while it imports) comes from ``backend.launch.start``, which the tests of those use.

The zygote is the daemons' parent, so it reaps them and sends each one's exit status over a socket of its own,
which ``Forked`` (a Popen for ``backend.launch.stop`` and ``ready``) reads. When the worker goes (its end of the
control socket closes), the zygote kills what it forked that is still running, and exits. Linux only (fork
after mlx and the Objective-C runtime are loaded is not safe on macOS); ``K3_TEST_FORK_DAEMONS=0`` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from k3lsp.wire import isolated

USABLE = sys.platform == "linux" and os.environ.get("K3_TEST_FORK_DAEMONS", "1") != "0"
PRELOAD = ("mlx.core", "backend.cli", "backend.serve")  # what `k3-backend serve` imports before its arguments
MAX_REQUEST = 1 << 17  # bytes: argv, cwd and environment of one daemon (one packet)
REPO = Path(__file__).resolve().parents[2]
FORK_TIMEOUT = 60.0  # seconds the zygote has to say which pid it forked
REAP_EVERY = 0.05  # seconds between the zygote's looks for exited daemons
STATUS = struct.Struct("!i")  # a daemon's exit code as Popen gives it (negative: the signal that ended it)


class Forked:
    """A daemon the zygote forked, as far as `backend.launch` and the tests use a Popen: pid, stdout, poll,
    wait, send_signal, kill, returncode."""

    def __init__(self, pid: int, stdout: IO[str], status: socket.socket, args: list[str]):
        self.pid, self.stdout, self.args = pid, stdout, args
        self.returncode: int | None = None
        self._status = status

    def poll(self) -> int | None:
        return self.wait(0.0) if self._readable(0.0) else self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._readable(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            data = self._status.recv(STATUS.size)
            self._status.close()
            # no status (the zygote died first): the daemon was killed with it
            self.returncode = STATUS.unpack(data)[0] if len(data) == STATUS.size else -signal.SIGKILL
        return self.returncode

    def _readable(self, timeout: float | None) -> bool:
        return self.returncode is not None or bool(select.select([self._status], [], [], timeout)[0])

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still the daemon's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    """This worker's zygote process and its control socket; one request (and fork) at a time."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a request is one packet
        self.proc = subprocess.Popen(
            isolated.python_command(__name__, str(theirs.fileno()), unbuffered=True),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            process_group=0,  # a Ctrl-C at the terminal ends the worker, whose going ends this (and its daemons)
        )
        theirs.close()
        self.control = ours
        self.control.settimeout(FORK_TIMEOUT)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def fork(self, argv: list[str], stdout: int, stderr: int, cwd: Path) -> tuple[int, socket.socket]:
        mine, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps({"argv": argv, "cwd": str(cwd), "env": dict(os.environ)}).encode()
        with self.lock, child:
            socket.send_fds(self.control, [request], [stdout, stderr, child.fileno()])
            pid = self.control.recv(STATUS.size)
        if len(pid) != STATUS.size:
            mine.close()
            raise RuntimeError(f"the daemons' zygote is gone (exit code {self.proc.poll()})")
        return STATUS.unpack(pid)[0], mine

    def close(self) -> None:
        self.control.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_zygote: _Zygote | None = None


def spawn(serve_args: list[str], *, stderr: IO | None = None, cwd: Path | None = None) -> Forked:
    """`backend.launch.spawn`, forked from this worker's zygote (started at the first call)."""
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = _Zygote()
    read, write = os.pipe()
    try:
        pid, status = _zygote.fork(
            ["serve", *serve_args], write, 2 if stderr is None else stderr.fileno(), cwd or Path.cwd()
        )
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return Forked(pid, os.fdopen(read, "r"), status, ["k3-backend", "serve", *serve_args])


# --- the zygote ---------------------------------------------------------------------------------------------


def _serve(control: socket.socket) -> list[str] | None:
    """Fork a daemon per request until the worker closes the control socket; in a forked child, return what
    it runs (in the zygote, None once the worker is gone)."""
    children: dict[int, socket.socket] = {}
    try:
        while True:
            if select.select([control], [], [], REAP_EVERY)[0]:
                message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 3)
                if not message:
                    return None
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:  # the daemon-to-be: nothing of the zygote's is its to keep or to kill
                    control.close()
                    for status in children.values():
                        status.close()
                    children.clear()
                    return _become(request, *fds)
                children[pid] = socket.socket(fileno=fds[2])
                for fd in fds[:2]:
                    os.close(fd)
                control.sendall(STATUS.pack(pid))
            _reap(children)
    finally:
        for pid in children:  # the worker is gone: what it started must not outlive it
            _kill(pid)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        pid, wait_status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        status = children.pop(pid, None)
        if status is not None:
            with contextlib.suppress(OSError):  # the test may be done with it
                status.sendall(STATUS.pack(os.waitstatus_to_exitcode(wait_status)))
            status.close()


def _kill(pid: int) -> None:
    """SIGKILL a daemon and its group (what it started: mlx's kernel compilers), as `backend.launch.stop` does."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _become(request: dict, stdout: int, stderr: int, status: int) -> list[str]:
    """In the forked child: the daemon's own group, stdio, directory and environment."""
    os.close(status)
    os.setpgid(0, 0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (stdout, 1), (stderr, 2)):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    return request["argv"]


if __name__ == "__main__":
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    argv = _serve(socket.socket(fileno=int(sys.argv[1])))
    if argv is not None:
        import backend.cli

        sys.argv = [backend.cli.__file__, *argv]
        sys.exit(backend.cli.main(argv))
