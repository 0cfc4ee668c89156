"""`k3-backend doctor` under a real `mlx.launch` on the local pair, with a rank that never starts, and with two
ranks that hold different checkpoints."""

import json
import os
import shutil
import subprocess
import sys
import time

from tests.support.pair import REPO, free_port_block, launch_command


def run(cmd: list[str], env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        cwd=REPO,
        env=env or dict(os.environ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_doctor_passes_on_the_local_pair(tiny_model):
    done = run(launch_command(["doctor", "--model", str(tiny_model), "--trust-remote-code"]))
    out = done.stdout
    assert "doctor: all checks passed" in out, out + done.stderr[-3000:]
    assert "exited with code" not in done.stderr and "was killed" not in done.stderr, done.stderr[-3000:]
    assert "2 of 2" in out and "all_sum latency" in out and "all_sum 64 MB" in out
    assert out.count("max |diff|") == 2  # both ranks compared their sharded logits
    assert out.count("Kimi K3 channels") == 2  # both ranks loaded the tokenizer class as serve would
    assert out.count("does not apply on Linux") == 2  # the wired-memory cap is macOS's
    assert "same checkpoint on every rank" in out and "identical on 2 ranks" in out
    assert "mlx and mlx-lm versions" in out and "the overrides fit (on 2 ranks)" in out  # the same on both


def test_doctor_names_the_flag_a_remote_code_tokenizer_needs(tiny_model):
    done = run([sys.executable, "-m", "backend.cli", "doctor", "--model", str(tiny_model)])
    assert done.returncode == 1 and "doctor: FAILED" in done.stdout
    assert "tokenizer" in done.stdout and "--trust-remote-code" in done.stdout, done.stdout


def test_doctor_fails_clearly_when_a_rank_never_starts(tmp_path):
    hostfile = tmp_path / "ring.json"
    first = free_port_block(2)
    hostfile.write_text(json.dumps([[f"127.0.0.1:{first}"], [f"127.0.0.1:{first + 1}"]]))
    env = os.environ | {"MLX_HOSTFILE": str(hostfile), "MLX_RANK": "0"}  # rank 1 is never started
    tic = time.monotonic()
    done = run([sys.executable, "-m", "backend.cli", "doctor", "--timeout", "3"], env=env, timeout=60)
    assert done.returncode != 0
    assert time.monotonic() - tic < 30
    assert "rank 0" in done.stderr and "did not all connect within 3 s" in done.stderr, done.stderr[-2000:]
    assert "hostfile" in done.stderr


def test_doctor_fails_when_the_model_is_missing(tmp_path):
    done = run([sys.executable, "-m", "backend.cli", "doctor", "--model", str(tmp_path / "absent")])
    assert done.returncode == 1
    assert "no *.safetensors" in done.stdout and "FAIL" in done.stdout and "doctor: FAILED" in done.stdout


def test_doctor_names_the_files_in_which_the_ranks_checkpoints_differ(tiny_model, tmp_path):
    """Rank 1 holds a half-copied checkpoint (its weights file cut short): it would load and give wrong logits."""
    copy = shutil.copytree(tiny_model, tmp_path / "tiny")
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    hostfile = tmp_path / "ring.json"
    first = free_port_block(2)
    hostfile.write_text(json.dumps([[f"127.0.0.1:{first}"], [f"127.0.0.1:{first + 1}"]]))
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backend.cli",
                "doctor",
                "--model",
                str(model),
                "--trust-remote-code",
                "--bandwidth-mb",
                "1",
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ | {"MLX_HOSTFILE": str(hostfile), "MLX_RANK": str(rank)},
        )
        for rank, model in enumerate([tiny_model, copy])
    ]
    try:
        outs = [rank.communicate(timeout=240) for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.wait(10)
    out = outs[0][0]
    assert [rank.returncode for rank in ranks] == [1, 1], outs
    assert "doctor: FAILED" in out
    size = (tiny_model / "model.safetensors").stat().st_size
    assert "rank 1 differs from rank 0 in model.safetensors" in out.replace("\n", " ").replace("│", " "), out
    assert f"size={size}" in out and f"size={size // 2}" in out, out
