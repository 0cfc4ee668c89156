"""Shared test setup: one mlx kernel cache for every test process, and session-built tiny checkpoints.

mlx on CPU JIT-compiles kernels with g++ into $TMPDIR/mlx (about 18 s cold). All tests, and the
daemons and ranks they start (which inherit the environment), share <repo>/.cache/tmp so that cost
is paid once per machine, not once per process.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MLX_TMPDIR = REPO / ".cache" / "tmp"
MLX_TMPDIR.mkdir(parents=True, exist_ok=True)
os.environ["TMPDIR"] = str(MLX_TMPDIR)

PRUNE_KEEP = [0, 2, 3, 5, 7]  # 5 of the tiny model's 8 experts


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A make-tiny checkpoint (8 experts, 4 layers, seed 0) in the release's packaging (the k3 dialect: a
    remote-code tokenizer class), built once per test session."""
    from backend.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def jinja_model(tiny_model) -> Path:
    """The same weights and vocabulary with the made-up Jinja template (the jinja dialect)."""
    from backend.tiny import make_tiny

    return make_tiny(tiny_model.with_name("tiny-jinja"), dialect="jinja")


@dataclass(frozen=True)
class Checkpoint:
    dialect: str  # "k3" or "jinja" (backend/tiny.py)
    path: Path


@pytest.fixture(scope="session", params=["k3", "jinja"])
def checkpoint(request) -> Checkpoint:
    """Each dialect of the tiny checkpoint in turn: engine and agent tests run on both renderers, so the
    daemon is shown to depend on neither's quirks. Built once per session each."""
    fixture = "tiny_model" if request.param == "k3" else "jinja_model"
    return Checkpoint(request.param, request.getfixturevalue(fixture))


@pytest.fixture(scope="session")
def pruned_model(tiny_model) -> Path:
    """`tiny_model` pruned to the experts PRUNE_KEEP (config records them as kept_experts)."""
    from backend.tiny import prune

    return prune(tiny_model, tiny_model.with_name("tiny-pruned"), PRUNE_KEEP)
