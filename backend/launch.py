"""Start `k3-backend serve` as a child process and learn its endpoint from the ready line.

Used by the demo (`k3-backend demo`) and by the tests, which both need a real daemon process on an endpoint
of their own: a private ipc socket, or `--bind tcp://127.0.0.1:0` (with --insecure), where the daemon picks
the port; its one ready line says which.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from k3lsp.wire import isolated

READY = "k3-backend ready on "  # printed by serve (followed by the endpoint) once it serves, read here
LISTENING = "k3-backend listening on "  # printed by serve once bound, before the model is loaded
EXIT_GRACE = 10.0  # seconds a daemon that closed its stdout has to exit by itself


class LaunchError(RuntimeError):
    """The daemon exited before its ready line (the message has its exit code) or stayed silent too long.

    Its log is wherever ``stderr`` went; pass a file to read it.
    """


def start(
    serve_args: list[str],
    *,
    stderr: IO | int | None = None,
    ready_timeout: float = 180.0,
    cwd: Path | None = None,
    line: str = READY,
    echo: Callable[[str], None] | None = None,
) -> tuple[subprocess.Popen, str]:
    """Run `python -m backend.cli serve *serve_args`; return the process and the endpoint it serves.

    Returns once the daemon printed ``line``: READY (the model is loaded), or LISTENING (bound, still loading).
    ``echo`` gets each line before it (what the daemon is doing: loading the weights, compiling the kernels).
    The daemon imports nothing from ``cwd`` (k3lsp.wire.isolated): the demo starts it in the user's directory.
    """
    proc = spawn(serve_args, stderr=stderr, cwd=cwd)
    return proc, ready(proc, ready_timeout, line, echo)


def spawn(serve_args: list[str], *, stderr: IO | int | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """The `serve` process, its stdout a text pipe for ``ready``, leading a process group of its own."""
    return subprocess.Popen(
        isolated.python_command("backend.cli", "serve", *serve_args, unbuffered=True),
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd=cwd,
        text=True,
        process_group=0,  # its own group: what it starts (mlx's kernel compilers) ends with it in stop()
    )


def ready(
    proc: subprocess.Popen, timeout: float = 180.0, line: str = READY, echo: Callable[[str], None] | None = None
) -> str:
    """The endpoint of ``proc``'s ``line`` (see ``start``), or LaunchError with ``proc`` stopped.

    ``proc`` is anything shaped like a Popen with a text stdout: tests fork their daemons (tests/support/zygote.py).
    """
    try:
        endpoint, exited = wait_ready(proc, timeout, line, echo)
    except BaseException:  # interrupted while it starts (k3lsp.wire.ending): the daemon must not outlive us
        stop(proc)
        raise
    if endpoint is None:
        if exited:  # its stdout is closed, its exit may be a moment behind: a SIGTERM now would interrupt it
            code = stop(proc, grace=EXIT_GRACE)
            raise LaunchError(f"k3-backend serve exited with code {code} before it was ready")
        code = stop(proc)
        raise LaunchError(f"k3-backend serve was not ready within {timeout:g} s (stopped, exit code {code})")
    return endpoint


def wait_ready(
    proc: subprocess.Popen, timeout: float, line: str = READY, echo: Callable[[str], None] | None = None
) -> tuple[str | None, bool]:
    """(endpoint from the ready line, or the listening line when ``line`` is LISTENING, or None; whether stdout
    ended first): read in a thread so the wait is bounded.

    Works for `serve` itself and for `mlx.launch` running it, whose stdout carries rank 0's lines.
    """
    found: list[str] = []

    def read() -> None:
        for text in proc.stdout:
            if text.startswith(line):
                found.append(text[len(line) :].strip())
                return
            if echo is not None:
                echo(text.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    # stdout ended: the process is gone (or closed it, which serve never does)
    return (found[0] if found else None), not reader.is_alive() and not found


def stop(proc: subprocess.Popen, timeout: float = 30.0, grace: float = 0.0) -> int:
    """SIGTERM the process we started (by PID) unless it exits within ``grace`` seconds, SIGKILL it if it does not
    exit then; returns its exit code. A process leading its own group (``start``'s) takes its group with it: a
    daemon stopped while mlx JIT-compiles its kernels would otherwise leave the compilers running."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    if proc.poll() is None:
        leads = _leads_group(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if leads:  # the group outlives its leader only through what it started; no one else can hold its id
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    if proc.stdout:
        proc.stdout.close()
    return proc.returncode


def _leads_group(pid: int) -> bool:
    """Whether the live process ``pid`` leads its own process group."""
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
