"""The release-shaped checkpoint (a remote-code tokenizer class) on two ranks under `mlx.launch` on 127.0.0.1:
every rank refuses it without `--trust-remote-code` (sharded_load would trust it by default), and with the
flag the pair serves it."""

import os
import re
import subprocess

from backend.launch import READY
from tests.pair.test_serve_pair import script_args
from tests.support.daemon import Wire, audit_fields
from tests.support.pair import REPO, launch_command, launched


def test_without_the_flag_the_ranks_refuse_it(tiny_model, tmp_path):
    """Both ranks check before loading; the launcher ends the other rank once the first one exited, so the
    second refusal may or may not have been printed by then."""
    cmd = launch_command(["serve", "--model", str(tiny_model), "--bind", f"ipc://{tmp_path}/daemon.sock"])
    done = subprocess.run(
        cmd,
        input="y\n",
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    log = done.stdout + done.stderr
    assert READY not in done.stdout and "[y/N]" not in log
    assert re.search(r"rank [01] exited with code 1\b", log), log[-3000:]
    assert 1 <= log.count("pass --trust-remote-code if you trust this checkpoint") <= 2, log[-3000:]


async def test_with_the_flag_the_pair_serves_it(tiny_model, tmp_path):
    with launched(["--model", str(tiny_model), *script_args(tmp_path)]) as pair:  # launched passes the flag
        async with Wire(pair.endpoint, timeout=120) as wire:
            welcome = await wire.ask("hello", "h", client="test", version="0")
            msgs = await wire.request("audit", "a", **audit_fields("unscripted", max_tokens=8))
    assert welcome["ranks"] == 2
    assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["generated_tokens"] >= 1
