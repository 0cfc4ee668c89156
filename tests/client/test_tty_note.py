"""`k3lsp` with no command is a language server on stdin/stdout: run bare in a terminal it used to wait in silence.
With a terminal on stdin it says so on stderr; with a pipe (an editor) it prints nothing. Real processes: stdin is
a pseudo-terminal from ``pty.openpty()``, or a pipe."""

from __future__ import annotations

import os
import pty
import selectors
import subprocess
import sys
import time

NOTE = "k3lsp: the k3 audit language server, waiting for an editor to speak LSP on stdin/stdout"
WAIT_S = 60  # the process imports the server before it speaks: bounded, generous on a loaded machine


def start(stdin) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "k3lsp.cli"], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def read_until(stream, needle: bytes, deadline: float) -> bytes:
    """What ``stream`` gave until ``needle`` appeared, it closed, or the deadline passed."""
    got = b""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while needle not in got and (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            got += chunk
    return got


def test_a_terminal_on_stdin_gets_a_note_on_stderr(tmp_path):
    leader, follower = pty.openpty()
    proc = start(follower)
    os.close(follower)
    try:
        said = read_until(proc.stderr, b"k3lsp --help", time.monotonic() + WAIT_S).decode()
        assert NOTE in said, said
        assert "`k3lsp audit PATH`" in said and "Ctrl-D" in said, said
    finally:
        proc.kill()
        proc.wait(10)
        os.close(leader)


def test_a_pipe_on_stdin_gets_nothing_an_editor_would_see_as_an_error(tmp_path):
    proc = start(subprocess.PIPE)
    try:
        proc.stdin.close()  # end of input: the server stops, having printed whatever it prints at start
        said = read_until(proc.stderr, b"\0", time.monotonic() + WAIT_S).decode()
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert said == "", said
