"""A bench script's quick mode, run as a process: what the tests of tests/bench read."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def quick_run(script: str, timeout: float) -> str:
    """The output of ``bench/<script> --quick``; fails the test (with its stderr) when the script fails."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
