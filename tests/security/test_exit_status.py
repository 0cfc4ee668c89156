"""The ranks' exit status files (`K3_EXIT_STATUS_DIR`, backend/exitstatus.py) on a host another user shares.

The supervisor names the directory in the launch command, which every user of a rank's host can read (`ps`),
and on a rank's host other than the supervisor's the directory does not exist until the rank makes it. Another
user who plants it first (a symlink to the victim's folder, or a folder of their own with a symlink inside)
must not make the rank write where they choose, nor learn or decide the exit code the supervisor reads.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from backend import exitstatus

NOBODY = 65534


@pytest.fixture
def rank(monkeypatch):
    def at(directory: Path, number: int = 1) -> None:
        monkeypatch.setenv(exitstatus.ENV, str(directory))
        monkeypatch.setenv("MLX_RANK", str(number))

    return at


def test_a_missing_directory_is_created_private_and_the_status_read_back(tmp_path, rank):
    status = tmp_path / "k3-exit-abc"
    rank(status)
    exitstatus.record(3)
    assert stat.S_IMODE(status.stat().st_mode) == 0o700
    assert [p.name for p in status.iterdir()] == ["rank-1.json"]
    assert stat.S_IMODE((status / "rank-1.json").stat().st_mode) == 0o600
    assert exitstatus.read(status) == {1: 3}


def test_a_planted_symlink_to_another_folder_is_not_followed(tmp_path, rank):
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    planted = tmp_path / "k3-exit-abc"
    planted.symlink_to(victim)
    rank(planted)
    exitstatus.record(0)
    assert list(victim.iterdir()) == []
    assert exitstatus.read(planted) == {}  # nor does the supervisor read what a link leads to


def test_a_planted_folder_of_another_user_is_refused_and_its_links_not_followed(tmp_path, rank):
    if os.geteuid() != 0:
        pytest.skip("planting a folder of another user needs root (it is chowned to uid 65534)")
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own file\n")
    planted = tmp_path / "k3-exit-abc"
    planted.mkdir(mode=0o777)
    for name in ("rank-1.tmp", "rank-1.json", f"rank-1.{os.getpid()}.tmp"):
        (planted / name).symlink_to(victim)
    os.chown(planted, NOBODY, NOBODY)
    rank(planted)
    exitstatus.record(0)
    assert victim.read_text() == "the victim's own file\n"
    assert exitstatus.read(planted) == {}


def test_links_inside_the_own_private_folder_are_not_followed(tmp_path, rank):
    victim = tmp_path / "victim.txt"
    victim.write_text(json.dumps({"rank": 1, "code": 0, "pid": 1}))
    status = tmp_path / "k3-exit-abc"
    status.mkdir(mode=0o700)
    (status / "rank-1.json").symlink_to(victim)
    assert exitstatus.read(status) == {}  # a link is no rank's status
    (status / "rank-1.json").unlink()
    (status / "rank-1.tmp").symlink_to(victim)
    rank(status)
    exitstatus.record(3)
    assert json.loads(victim.read_text())["code"] == 0  # the link was not written through
    assert exitstatus.read(status) == {1: 3}
