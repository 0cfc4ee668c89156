"""`k3-backend` imports only the chosen subcommand's module: help and key set-up never load mlx."""

import os
import subprocess
import sys

PROBE = """
import contextlib, sys
from backend.cli import main
with contextlib.suppress(SystemExit):
    main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm"))
print("HEAVY", heavy, file=sys.stderr)
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_command_without_importing_mlx():
    done = run("--help")
    assert "HEAVY []" in done.stderr, done.stderr
    for name in ("serve", "doctor", "make-tiny", "keys", "fidelity", "demo"):
        assert name in done.stdout


def test_keys_init_does_not_import_mlx(tmp_path):
    done = run("keys", "init", "--dir", str(tmp_path / "k"))
    assert "HEAVY []" in done.stderr, done.stderr
    assert (tmp_path / "k" / "authorized").is_dir()


def test_a_subcommand_still_gets_its_own_arguments():
    assert "--prefill-step-size" in run("serve", "--help").stdout
    done = run("serve")  # --model is required
    assert "the following arguments are required: --model" in done.stderr


def test_serve_refuses_a_bad_effort_budget_before_loading_anything(tmp_path):
    done = run("serve", "--model", str(tmp_path / "none"), "--effort-tokens", "medium=5")
    assert "--effort-tokens wants EFFORT=N with EFFORT in off, low, high, max" in done.stderr, done.stderr
    assert "cannot load model" not in done.stderr


def test_the_demo_refuses_a_missing_path_before_building_or_starting_anything(tmp_path):
    env_cache = tmp_path / "user-cache"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "demo", str(tmp_path / "no-such.c")],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"XDG_CACHE_HOME": str(env_cache)},  # where the tiny checkpoint would be built
    )
    assert f"k3-backend demo: {tmp_path / 'no-such.c'}: no such file or directory" in done.stderr, done.stderr
    assert not env_cache.exists() and "starting k3-backend" not in done.stdout  # no checkpoint, no daemon
