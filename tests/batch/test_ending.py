"""A command that ``ending.run`` ends on a signal exits with 128 + the signal, wherever the signal lands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A SIGTERM that lands in code run by exec of a string, as it does in a dataclass's methods while one is imported.
INTERRUPTED_IN_EXEC = """
import os, signal, sys
from k3lsp.wire import ending

def command():
    exec("os.kill(os.getpid(), signal.SIGTERM)\\nfor _ in range(1000): pass", {"os": os, "signal": signal})
    return 0

sys.exit(ending.run("interrupted", command))
"""


def test_a_signal_inside_exec_still_ends_the_command_with_128_plus_the_signal(tmp_path):
    (tmp_path / "interrupted.py").write_text(INTERRUPTED_IN_EXEC)
    done = subprocess.run(
        [sys.executable, "-m", "interrupted"],
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.splitlines() == ["interrupted: interrupted by SIGTERM"]
