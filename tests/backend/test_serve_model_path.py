"""`serve --model` with a path that does not exist says so in one sentence, before binding or loading anything,
instead of Hugging Face's repo-id rules (it used to bind, start loading, then quote `Repo id must use ...`)."""

import subprocess
import sys

import pytest

from backend.launch import LISTENING


@pytest.mark.parametrize("model", ["/nonexistent/kimi", "./no/such/checkpoint", "~/no-such-model-k3lsp"])
def test_a_missing_checkpoint_directory_is_named_in_one_sentence(model, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", "--model", model, "--bind", f"ipc://{tmp_path}/run/d.sock"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"k3-backend serve: cannot load model {model}: no such directory; give a checkpoint directory or a "
        "Hugging Face repo id (owner/name)"
    ]
    assert LISTENING not in done.stdout
