"""`k3lsp audit` on a terminal shows how far it is and about how long is left (docs/cli.md, "Progress").

The command runs as a real process whose stderr is a pseudo-terminal, against the scripted daemon of
tests/batch/holding.py: one unit answered at once, the other held, so the bar stays at 1/2 with an estimate.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

from tests.batch.holding import holding
from tests.batch.processes import reaped
from tests.support.batch import k3lsp_env

WAIT = 60
TWO = "int good(int a)\n{\n\treturn a;\n}\n\nint held(int a)\n{\n\treturn a + 1;\n}\n"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_progress_bar_estimates_the_time_left(tmp_path):
    (tmp_path / "two.c").write_text(TWO)
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))  # wide: every column shows
    shown: list[str] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal's last writer closed it
                return
            if not data:
                return
            shown.append(ANSI.sub("", data.decode(errors="replace")))

    with holding({"good": []}) as daemon:
        proc = subprocess.Popen(
            [sys.executable, "-m", "k3lsp.cli", "audit", "two.c", "--endpoint", daemon.endpoint, "--jobs", "1"],
            stdout=subprocess.DEVNULL,
            stderr=terminal,
            cwd=tmp_path,
            env=k3lsp_env(tmp_path / "cache") | {"TERM": "xterm", "COLUMNS": "200"},
        )
        os.close(terminal)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        with reaped(proc):
            assert daemon.held.wait(WAIT)
            deadline = time.monotonic() + WAIT
            while not re.search(r"1/2.*about 0:\d\d left", "".join(shown)) and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            proc.wait(WAIT)
        reader.join(10)
        os.close(master)
    assert re.search(r"auditing .* 1/2 .*about 0:\d\d left", "".join(shown)), "".join(shown)[-2000:]
