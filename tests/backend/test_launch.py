"""backend.launch says whether the daemon exited early (with its exit code) or stayed silent."""

import subprocess
import time
from pathlib import Path

import pytest

from backend import launch


def test_an_early_exit_is_reported_as_one_with_its_exit_code(tmp_path):
    with pytest.raises(launch.LaunchError, match="exited with code 2 before it was ready"):
        launch.start(
            ["--model", str(tmp_path / "none"), "--bind", "udp://127.0.0.1:1"],
            stderr=subprocess.DEVNULL,
            ready_timeout=120,
        )


def test_stopping_a_process_that_leads_its_group_ends_what_it_started(tmp_path):
    """A daemon stopped while mlx JIT-compiles its kernels left the compilers behind it (a SIGTERM to the demo
    while its daemon loaded, under load): stop() ends the group that start() gives the daemon."""
    pid_file = tmp_path / "grandchild"
    leader = subprocess.Popen(["sh", "-c", f"sleep 600 & echo $! > {pid_file}; trap '' TERM; wait"], process_group=0)
    for _ in range(200):  # bounded: 20 s
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    grandchild = int(pid_file.read_text())
    launch.stop(leader, timeout=5)
    for _ in range(50):  # bounded: 5 s for the kernel to take it away
        if not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild):
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild), "the group's sleep outlived stop()"


def _state(pid: int) -> str:
    """The process's state letter (Z: ended, waiting for its parent to read it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
