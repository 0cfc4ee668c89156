"""A checkpoint packaged like the release (its tokenizer is Python shipped with it) is served only with
`--trust-remote-code`. Without it `serve` exits at once naming the flag: transformers never asks its `[y/N]`
question (stdin answers "y" here, and nothing may read it), and nothing reaches stdout, the stream of serve's
listening and ready lines.
"""

import shutil
import subprocess
import sys
import threading
import time

import pytest

from backend import dist
from backend.launch import LISTENING, READY, stop
from tests.support.daemon import REPO, Wire

QUESTION = "[y/N]"


def serve(model, sockets, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "serve",
            "--model",
            str(model),
            "--bind",
            f"ipc://{sockets}/daemon.sock",
            *flags,
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_without_the_flag_serve_refuses_at_once_and_asks_nothing(tiny_model, tmp_path):
    proc = serve(tiny_model, tmp_path)
    tic = time.monotonic()
    out, err = proc.communicate("y\n", timeout=120)  # an answer on stdin, were anything to read it
    assert proc.returncode == 1
    assert out == ""  # not the question, not anything
    assert QUESTION not in err
    assert "--trust-remote-code" in err and "needs to run Python code shipped with it" in err, err[-2000:]
    assert "tokenizer class (auto_map in tokenizer_config.json)" in err
    assert time.monotonic() - tic < 60


async def test_with_the_flag_only_the_daemons_own_lines_are_on_stdout(tiny_model, tmp_path):
    """The checkpoint's own code prints while it loads (as a release's code may): not on stdout."""
    noisy = shutil.copytree(tiny_model, tmp_path / "noisy")
    code = noisy / "tokenization_kimi.py"
    code.write_text(code.read_text() + '\nprint("hello from the checkpoint", flush=True)\n')
    proc = serve(noisy, tmp_path, "--trust-remote-code")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        for _ in range(1800):  # bounded: 180 s
            if any(line.startswith(READY) for line in lines) or proc.poll() is not None:
                break
            time.sleep(0.1)
        ready = next((line for line in lines if line.startswith(READY)), None)
        assert ready is not None, proc.stderr.read() if proc.poll() is not None else lines
        assert lines[0] == LISTENING + ready[len(READY) :]
        async with Wire(ready[len(READY) :].strip()) as wire:
            welcome = await wire.ask("hello", "h", client="test", version="0")
        assert welcome["kind"] == "welcome" and welcome["model"] == "noisy"
    finally:
        stop(proc)
        reader.join(30)
        err = proc.stderr.read()
        proc.stderr.close()
    assert lines[-1] == ready and all(line.startswith("k3-backend ") for line in lines), lines  # the daemon's own
    assert "hello from the checkpoint" in err


def test_a_hub_checkpoint_that_needs_code_is_refused_without_the_question(tiny_model, capsys, monkeypatch):
    """Code found by transformers itself (a hub repo, whose files are not here before the load): it is told
    trust_remote_code=False explicitly, so it raises instead of asking, and the error names the flag."""
    monkeypatch.setattr(dist, "remote_code", lambda path: None)  # as for a repo id: nothing to read first
    with pytest.raises(dist.RemoteCodeError, match="--trust-remote-code"):
        dist.load_model(str(tiny_model))
    out, err = capsys.readouterr()
    assert QUESTION not in out + err
