"""backend.launch says whether the daemon exited early (with its exit code) or stayed silent."""

import subprocess

import pytest

from backend import launch


def test_an_early_exit_is_reported_as_one_with_its_exit_code(tmp_path):
    with pytest.raises(launch.LaunchError, match="exited with code 2 before it was ready"):
        launch.start(
            ["--model", str(tmp_path / "none"), "--bind", "udp://127.0.0.1:1"],
            stderr=subprocess.DEVNULL,
            ready_timeout=120,
        )
