"""Shared test setup: one mlx kernel cache for every test process, and session-built tiny checkpoints.

mlx on CPU JIT-compiles kernels with g++ into $TMPDIR/mlx (about 18 s cold). All tests, and the
daemons and ranks they start (which inherit the environment), share <repo>/.cache/tmp so that cost
is paid once per machine, not once per process.
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MLX_TMPDIR = REPO / ".cache" / "tmp"
MLX_TMPDIR.mkdir(parents=True, exist_ok=True)
os.environ["TMPDIR"] = str(MLX_TMPDIR)

PRUNE_KEEP = [0, 2, 3, 5, 7]  # 5 of the tiny model's 8 experts


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A make-tiny checkpoint (8 experts, 4 layers, seed 0), built once per test session."""
    from backend.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def pruned_model(tiny_model) -> Path:
    """`tiny_model` pruned to the experts PRUNE_KEEP (config records them as kept_experts)."""
    from backend.tiny import prune

    return prune(tiny_model, tiny_model.with_name("tiny-pruned"), PRUNE_KEEP)
