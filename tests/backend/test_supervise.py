"""The supervisor's decisions without a pair: how a run's end is described, what it reads from the launcher and
the ranks, when it stops, and the launchd jobs it writes."""

from __future__ import annotations

import plistlib
import subprocess
import sys
from pathlib import Path

import pytest

from backend import exitstatus, launchd, supervise
from tests.support.daemon import REPO


def test_a_kind_is_the_phase_and_the_ranks_own_codes_whichever_rank_failed_first():
    killed = supervise.Run(codes={1: -9, 0: 3}, served=12.0)
    assert killed.kind() == "while serving: killed by SIGKILL" and not killed.clean()
    assert killed.describe() == "rank 0 exit 3, rank 1 killed by SIGKILL"
    # Both ranks fail to load; which one the launcher ends first (SIGTERM, or before it wrote a code) is a race.
    kinds = {supervise.Run(codes=codes).kind() for codes in ({0: 1, 1: 1}, {0: 1, 1: -15}, {0: -15, 1: 1}, {0: 1})}
    assert kinds == {"at start: exit 1"}
    assert supervise.Run(codes={0: 3, 1: -15}).kind() == "at start: exit 3, killed by SIGTERM"  # nothing else
    assert supervise.Run(launcher=2).kind() == "at start: no rank reported an exit code, the launcher 2"
    assert supervise.Run(codes={0: 0, 1: 0}).clean() and not supervise.Run().clean()


def test_the_codes_are_what_the_ranks_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv(exitstatus.ENV, str(tmp_path))
    monkeypatch.setenv("MLX_RANK", "0")
    exitstatus.record(3)
    (tmp_path / "rank-7.json").write_text("{not json")
    assert exitstatus.read(tmp_path) == {0: 3}  # the malformed one is no code


@pytest.mark.parametrize("launcher", ["/v/bin/mlx.launch", "/v/bin/k3-launch"])
def test_a_launcher_gets_the_status_directory_on_every_host(launcher):
    assert supervise._with_status_dir([launcher, "--hostfile", "h.json", "--", "k3-backend", "serve"], "/tmp/s") == [
        launcher,
        "--env",
        "K3_EXIT_STATUS_DIR=/tmp/s",
        "--hostfile",
        "h.json",
        "--",
        "k3-backend",
        "serve",
    ]
    assert supervise._with_status_dir(["k3-backend", "serve"], "/tmp/s") == ["k3-backend", "serve"]


def test_a_single_command_that_keeps_failing_is_given_up_with_its_own_code():
    broken = "import sys; print('broken', file=sys.stderr); sys.exit(4)"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "supervise",
            "--backoff",
            "0.05",
            "--max-failures",
            "3",
            "--",
            sys.executable,
            "-c",
            broken,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert (
        "giving up after 3 failures in a row of the same kind (at start: exit 4; the last: rank 0 exit 4)"
        in done.stderr
    )
    assert "restarting in 0.05 s" in done.stderr and "restarting in 0.1 s" in done.stderr
    assert done.stderr.rstrip().endswith("broken")


def test_a_clean_exit_is_not_restarted():
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", "supervise", "--", sys.executable, "-c", "pass"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "exited cleanly" in done.stderr and "restarting in" not in done.stderr


def test_the_launchd_jobs(tmp_path):
    command = [
        "/opt/k3lsp/.venv/bin/mlx.launch",
        "--hostfile",
        "hostfiles/mac-pair-rdma.json",
        "--",
        "/opt/k3lsp/.venv/bin/k3-backend",
        "serve",
        "--model",
        "/models/Kimi-K3-Audit-451E",
    ]
    paths = launchd.write(tmp_path, command, 470000)
    pair = plistlib.loads(Path(paths[0]).read_bytes())
    assert pair["Label"] == "com.k3lsp.pair" and pair["RunAtLoad"] is True
    assert pair["ProgramArguments"][1:] == ["supervise", "--", *command]
    assert Path(pair["ProgramArguments"][0]).name == "k3-backend" and Path(pair["ProgramArguments"][0]).is_absolute()
    assert pair["KeepAlive"] == {"Crashed": True}  # a supervisor that gave up stays down
    wired = plistlib.loads(Path(paths[1]).read_bytes())
    assert wired["ProgramArguments"] == ["/usr/sbin/sysctl", "iogpu.wired_limit_mb=470000"] and wired["RunAtLoad"]
    assert [p.name for p in launchd.write(tmp_path / "no-cap", command, None)] == ["com.k3lsp.pair.plist"]
