"""`k3-backend serve` on two tensor-parallel ranks under a real `mlx.launch --backend ring` on 127.0.0.1.

Rank 0 serves the ROUTER; rank 1 follows its scheduling steps. Compared with a single-process daemon started
with the same flags, the pair must give the same tokens; it must batch, cancel one request on both ranks while
another runs, and keep idle ranks off the CPU.
"""

import asyncio
import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.support.daemon import Wire, audit_fields, serving
from tests.support.kimi import finding
from tests.support.pair import Pair, launched, wait_gone

# Long, varied text (no short period for the loop guard): a scripted generation that takes many steps.
LONG = " ".join(f"v{i} = a[{i}] + {i * 7 % 13};" for i in range(300))
SCRIPT = [{"unit": "long", "turns": [LONG]}]
# 160 greedy tokens a unit are enough to show a rank that disagrees; each costs a ring exchange per layer
ARGS = ["--temp", "0", "--max-tokens", "160", "--rank-tick", "1"]
UNITS = ["strcpy_user", "parse_header"]
CODE = "int f(char *p)\n{\n\tchar b[8];\n\tstrcpy(b, p);\n\treturn b[0];\n}\n"


def script_args(tmp: Path) -> list[str]:
    path = tmp / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return [*ARGS, "--script", str(path)]


@pytest.fixture(scope="module")
def pair(tiny_model, tmp_path_factory):
    with launched(["--model", str(tiny_model), *script_args(tmp_path_factory.mktemp("pair"))]) as p:
        yield p


async def explain_texts(endpoint: str) -> list[tuple[str, str]]:
    """(text, finish_reason) of one explain per unit, one after the other (no batching differences). Thinking is
    off: the random model's answer is then all response, the channel explain streams."""
    out = []
    async with Wire(endpoint, timeout=120) as wire:
        for unit in UNITS:
            msgs = await wire.request(
                "explain", unit, **audit_fields(unit, code=CODE), finding=finding(), thinking_effort="off"
            )
            assert msgs[-1]["kind"] == "done", msgs[-1]
            out.append(("".join(m["text"] for m in msgs if m["kind"] == "text"), msgs[-1]["stats"]["finish_reason"]))
    return out


async def single_process_texts(model: Path, tmp: Path) -> list[tuple[str, str]]:
    with serving(model, script=SCRIPT, args=ARGS) as one:
        return await explain_texts(one.endpoint)


def rank_lines(pair: Pair, rank: int, pattern: str) -> list[str]:
    return re.findall(rf"\[rank {rank}/2\] .*{pattern}.*", pair.log_text())


async def test_greedy_output_of_the_pair_equals_one_process(pair, tiny_model, tmp_path):
    async with Wire(pair.endpoint) as wire:
        welcome = await wire.ask("hello", "h", client="test", version="0")
    assert welcome["ranks"] == 2 and welcome["experts"] == 8
    through_pair = await explain_texts(pair.endpoint)
    assert all(text for text, _ in through_pair)
    assert through_pair == await single_process_texts(tiny_model, tmp_path)


async def test_pruned_pair_equals_one_process(pruned_model, tmp_path):
    with launched(["--model", str(pruned_model), *script_args(tmp_path)]) as p:
        async with Wire(p.endpoint) as wire:
            welcome = await wire.ask("hello", "h", client="test", version="0")
        assert (welcome["ranks"], welcome["experts"]) == (2, 5)
        through_pair = await explain_texts(p.endpoint)
    assert through_pair == await single_process_texts(pruned_model, tmp_path)


async def test_concurrent_requests_batch_on_the_pair(pair):
    async with Wire(pair.endpoint, timeout=120) as wire:
        for i in range(3):
            await wire.send(
                "audit", f"b{i}", **audit_fields("long", code=f"int g{i}(void)\n{{\n\treturn {i};\n}}\n", max_tokens=60)
            )
        results = [await wire.finish(f"b{i}") for i in range(3)]
        status = (await wire.ask("status", "s"))["status"]
    assert all(r[-1]["kind"] == "done" for r in results), [r[-1] for r in results]
    assert max(r[-1]["stats"]["batch_size_peak"] for r in results) > 1
    assert status["batch_size_peak"] > 1 and status["ranks"] == 2


async def test_cancel_one_of_two_stops_it_on_both_ranks(pair):
    cancelled_before = len(rank_lines(pair, 1, "finished: cancelled"))
    async with Wire(pair.endpoint, timeout=120) as wire:
        await wire.send("audit", "keep", **audit_fields("long", max_tokens=120))
        await wire.send("audit", "drop", **audit_fields("long", code="int h(void)\n{\n\treturn 1;\n}\n"))
        for _ in range(200):  # both running: the batch decodes two sequences
            status = (await wire.ask("status", "st"))["status"]
            if status["batch_size"] == 2:
                break
            await asyncio.sleep(0.1)
        assert status["batch_size"] == 2, status
        await wire.send("cancel", "drop")
        dropped = await wire.finish("drop")
        kept = await wire.finish("keep")
    assert dropped[-1]["kind"] == "cancelled"
    assert kept[-1]["kind"] == "done" and kept[-1]["stats"]["finish_reason"] == "length"
    for _ in range(100):  # rank 1's log lines arrive through the launcher, after rank 0's replies
        if len(rank_lines(pair, 1, "finished: cancelled")) > cancelled_before and rank_lines(
            pair, 1, "finished: length"
        ):
            break
        await asyncio.sleep(0.1)
    assert len(rank_lines(pair, 1, "finished: cancelled")) == cancelled_before + 1
    assert rank_lines(pair, 1, "finished: length")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def test_idle_ranks_and_their_launcher_do_not_spin(pair):
    pids = pair.rank_pids()
    assert sorted(pids) == [0, 1]
    pids["launcher"] = pair.launcher.pid  # mlx.launch itself used ~100 ticks a second here (backend/launcher.py)
    await asyncio.sleep(1.5)  # let the last request's turn end
    before = {r: cpu_ticks(p) for r, p in pids.items()}
    await asyncio.sleep(3)  # three liveness ticks (--rank-tick 1)
    used = {r: cpu_ticks(p) - before[r] for r, p in pids.items()}
    assert all(ticks <= 30 for ticks in used.values()), used  # a spinning process would use ~300 ticks


def test_sigterm_to_rank_0_stops_both_ranks_cleanly(tiny_model, tmp_path):
    """A normal stop is one more step: rank 0 shares `stop`, every rank drains and exits 0."""
    with launched(["--model", str(tiny_model), *script_args(tmp_path)]) as p:
        pids = p.rank_pids()
        os.kill(pids[0], signal.SIGTERM)
        assert wait_gone(list(pids.values()), 60), "a rank is still running"
        p.launcher.wait(30)
        log = p.log_text()
    assert "exited with code" not in log and "was killed" not in log, log[-3000:]
    assert "[rank 1/2] INFO backend.serve: stopped" in log and "[rank 0/2] INFO backend.serve: stopped" in log
