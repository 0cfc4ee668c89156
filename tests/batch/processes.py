"""The commands under test as real processes: ended by PID whatever the test does, and how a closed stdout must
end them (both programs' signal tests share these)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from k3lsp.wire.ending import EXIT_CLOSED_PIPE
from tests.support.batch import k3lsp_env


def start(module: str, args: list[str], tmp_path: Path, *, closed_stdout: bool = False, **env: str) -> subprocess.Popen:
    """`python -m MODULE ARGS` in ``tmp_path`` with a result cache of its own, stdout and stderr read as text; with
    ``closed_stdout``, its stdout is a pipe whose reader is gone before it starts (``| head -0``: every write fails)."""
    if not closed_stdout:
        return _popen(module, args, tmp_path, env, subprocess.PIPE)
    read, write = os.pipe()
    os.close(read)
    try:
        return _popen(module, args, tmp_path, env, write)
    finally:
        os.close(write)


def _popen(module: str, args: list[str], tmp_path: Path, env: dict[str, str], stdout: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=k3lsp_env(tmp_path / "cache") | env,
    )


@contextlib.contextmanager
def reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc`` for the block; killed (by its PID) if it still runs after it, a failed assert included."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def assert_quiet(proc: subprocess.Popen, err: str) -> None:
    """It ended at a closed stdout as a shell expects: no traceback, no word about the pipe, status 141."""
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == EXIT_CLOSED_PIPE, err
