"""A rank of the pair dies: the editors get `error` `rank_failure` at once and rank 0 exits non-zero
(so the supervisor restarts the pair) instead of everyone waiting on a collective that never completes."""

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from backend import serve
from tests.pair.test_serve_pair import ARGS, SCRIPT, script_args
from tests.support import kimi
from tests.support import pair as p
from tests.support.daemon import Wire, audit_fields
from tests.support.pair import REPO, free_port_block, launched, wait_gone

BOUND = 20.0  # seconds the client may wait for the error after rank 1 died


async def test_killing_rank_1_fails_open_requests_and_rank_0_exits(tiny_model, tmp_path):
    with launched(["--model", str(tiny_model), *script_args(tmp_path)]) as pair:
        pids = pair.rank_pids()
        async with Wire(pair.endpoint, timeout=120) as wire:
            await wire.send("audit", "long", **audit_fields("long"))
            for _ in range(200):  # generating
                if (await wire.ask("status", "st"))["status"]["batch_size"] == 1:
                    break
                await asyncio.sleep(0.1)
            killed = time.monotonic()
            os.kill(pids[1], signal.SIGKILL)
            msgs = await wire.finish("long")
            waited = time.monotonic() - killed
        assert msgs[-1]["kind"] == "error" and msgs[-1]["code"] == "rank_failure", msgs[-1]
        assert waited < BOUND
        assert wait_gone([pids[0]], 30), "rank 0 is still running"
        pair.launcher.wait(30)
        log = pair.log_text()
    assert re.search(r"rank 0 exited with code 3", log), log[-3000:]


async def test_a_stop_signal_racing_the_peer_death_still_says_rank_failure(tiny_model, tmp_path):
    """mlx.launch sends rank 0 SIGTERM as soon as rank 1 dies, often before rank 0's engine has noticed: here the
    request waits for its editor's tool result (the engine idle, the next tick 60 s away) and the signal follows
    rank 1's death at once (not before it: a SIGTERM sent before the killed rank had closed its sockets could let
    rank 0's turn exchange with it under load, and said shutdown). Rank 0 takes a turn on the signal, its exchange
    finds the dead peer, and the request ends with rank_failure, not shutdown (a fixed grace before stopping said
    shutdown)."""
    script = [{"unit": "asks", "turns": [kimi.turn(("read_lines", {"path": "src/f.c", "start": 1, "end": 2}))]}]
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    with launched(["--model", str(tiny_model), *ARGS, "--rank-tick", "60", "--script", str(path)]) as pair:
        pids = pair.rank_pids()
        async with Wire(pair.endpoint, timeout=120) as wire:
            await wire.send("audit", "asks", **audit_fields("asks"))
            for _ in range(1000):  # bounded by the wire's timeout per message
                if (await wire.next_for("asks"))["kind"] == "tool_request":
                    break
            os.kill(pids[1], signal.SIGKILL)
            assert wait_gone([pids[1]], 30)  # dead, its sockets closed, as mlx.launch sees it before its SIGTERM
            os.kill(pids[0], signal.SIGTERM)
            msgs = await wire.finish("asks")
        assert msgs[-1]["kind"] == "error" and msgs[-1]["code"] == "rank_failure", msgs[-1]
        assert wait_gone([pids[0]], 30), "rank 0 is still running"


async def test_rank_1_dying_while_idle_ends_rank_0(tiny_model, tmp_path):
    """No request is open: rank 0 finds the dead peer (liveness tick or the launcher's SIGTERM) and exits 3."""
    with launched(["--model", str(tiny_model), *script_args(tmp_path)]) as pair:
        pids = pair.rank_pids()
        os.kill(pids[1], signal.SIGKILL)
        assert wait_gone([pids[0]], 30), "rank 0 is still running"
        pair.launcher.wait(30)
        log = pair.log_text()
    assert re.search(r"rank 0 exited with code 3", log), log[-3000:]


@pytest.mark.parametrize(
    ("rank_timeout", "signalled", "says"),
    [
        ("3", False, "did not complete on all ranks within 3 s"),
        ("300", True, f"did not complete on all ranks within {serve.STOP_GRACE:g} s of the stop signal"),
    ],
    ids=["watchdog", "stop signal"],
)
async def test_hung_rank_is_caught(tiny_model, tmp_path, rank_timeout, signalled, says):
    """Rank 1 stops answering without closing its sockets (SIGSTOP): no collective errors, only the
    watchdog (--rank-timeout) can end the step, or, when rank 0 is told to stop meanwhile (as mlx.launch does
    when a rank dies: a killed peer does not always make the collective fail either), the stop's bounded wait
    for a turn. The client gets rank_failure and rank 0 exits 3."""
    args = ["--model", str(tiny_model), *script_args(tmp_path), "--rank-timeout", rank_timeout]
    with launched(args) as pair:
        pids = pair.rank_pids()
        try:
            async with Wire(pair.endpoint, timeout=120) as wire:
                await wire.send("audit", "long", **audit_fields("long"))
                for _ in range(200):
                    if (await wire.ask("status", "st"))["status"]["batch_size"] == 1:
                        break
                    await asyncio.sleep(0.1)
                os.kill(pids[1], signal.SIGSTOP)
                if signalled:
                    os.kill(pids[0], signal.SIGTERM)
                stopped = time.monotonic()
                msgs = await wire.finish("long")
                waited = time.monotonic() - stopped
            assert msgs[-1]["kind"] == "error" and msgs[-1]["code"] == "rank_failure", msgs[-1]
            assert says in msgs[-1]["message"]
            assert waited < BOUND
            assert wait_gone([pids[0]], 30), "rank 0 is still running"
        finally:
            with contextlib.suppress(ProcessLookupError):  # the launcher may have ended it already
                os.kill(pids[1], signal.SIGKILL)  # the launcher waits for the stopped rank it was told to end
        pair.launcher.wait(30)
        log = pair.log_text()
    assert re.search(r"rank 0 exited with code 3", log), log[-3000:]


def test_serve_with_a_rank_that_never_starts_exits(tiny_model, tmp_path):
    """Init would wait forever for the missing rank: serve gives up after --rank-timeout, saying why."""
    first = free_port_block(2)
    hostfile = tmp_path / "ring.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{first}"], [f"127.0.0.1:{first + 1}"]]))
    env = os.environ | {"MLX_HOSTFILE": str(hostfile), "MLX_RANK": "0"}  # rank 1 is never started
    tic = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "serve",
            "--model",
            str(tiny_model),
            "--bind",
            f"ipc://{tmp_path}/daemon.sock",
            "--rank-timeout",
            "3",
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "ready" not in done.stdout
    assert time.monotonic() - tic < 30
    assert "rank 0: the ranks did not all connect within 3 s" in done.stderr, done.stderr[-2000:]


FAULT_SCRIPT = [
    {"unit": "boom", "turns": [{"fail": "injected prefill failure"}]},
    *SCRIPT,
    {"unit": "*", "turns": ["no findings"]},
]


async def test_a_deterministic_failure_fails_one_request_and_the_pair_serves_on(tiny_model, tmp_path):
    """A request whose prefill raises on both ranks ends with `failed`, alone: the request decoding beside it
    finishes, a later one is served, both ranks keep running; and every step took one collective."""
    script = tmp_path / "faults.json"
    script.write_text(json.dumps(FAULT_SCRIPT))
    with launched(["--model", str(tiny_model), *ARGS, "--script", str(script)]) as pair:
        pids = pair.rank_pids()
        async with Wire(pair.endpoint, timeout=120) as wire:
            await wire.send("audit", "long", **audit_fields("long", max_tokens=150))
            for _ in range(200):  # decoding
                if (await wire.ask("status", "st"))["status"]["batch_size"] == 1:
                    break
                await asyncio.sleep(0.1)
            await wire.send("audit", "boom", **audit_fields("boom", code="int boom(void)\n{\n\treturn 1;\n}\n"))
            boom = await wire.finish("boom")
            long = await wire.finish("long")
            after = await wire.request("audit", "after", **audit_fields("after", code="int z(void)\n{\n}\n"))
            status = (await wire.ask("status", "st2"))["status"]
        assert boom[-1]["kind"] == "error" and boom[-1]["code"] == "failed", boom[-1]
        assert "injected prefill failure" in boom[-1]["message"]
        assert long[-1]["kind"] == "done" and long[-1]["stats"]["finish_reason"] == "length", long[-1]
        assert after[-1]["kind"] == "done", after[-1]
        assert all(p.alive(pid) for pid in pids.values())
        link = status["engine"]["link"]
        assert link["turns"] > 150 and link["collectives"] == link["turns"], link
        for _ in range(50):  # rank 1's log lines arrive through the launcher
            if re.search(r"\[rank 1/2\] .*request \d+ finished: error", pair.log_text()):
                break
            await asyncio.sleep(0.1)
        log = pair.log_text()
    assert re.search(r"\[rank 1/2\] .*request \d+ finished: error", log), log[-3000:]
    assert "rank failure" not in log and "exited with code" not in log, log[-3000:]
