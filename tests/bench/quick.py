"""A bench script's quick mode, run as a process: what the tests of tests/bench read."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def quick_run(script: str, timeout: float) -> str:
    """The output of ``bench/<script> --quick``; fails the test (with its output) when the script fails, and
    skips it when a profiler may not attach to another process here (ptrace not permitted)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    if done.returncode != 0 and "ptrace" in done.stderr.lower():
        pytest.skip(f"{script}: the profiler cannot attach here (ptrace not permitted): {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout
