"""One collective per engine step on a pair: what a step's exchange costs, against the two it took before.

Every engine step, rank 0 shares its commands with the other ranks and every rank shares the outcome of its
last step (backend/pair.py). `dist.exchange` does it with one `all_sum` (each rank writes into its own slot).
The peer is the way `mlx_lm.server` shares an object, which k3-backend used before: an `all_sum` of the
pickled size, then one of the bytes. Both run on two ring ranks on 127.0.0.1 under `mlx.launch`, alternating
blocks of REPS exchanges of a decode step's payload (no new requests: what most steps carry), medians
reported: `ratio two_collectives_over_one = X`.

Then a real pair (`k3-backend serve` on the two ranks, `--script`) generates LONG tokens for one request, and
its `status` says how many steps it ran, how many collectives they took and the time per step in them.

Run: `uv run python bench/pair_exchange.py` (about a minute; `--quick`: a few exchanges, what tests/bench runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support (run as a script from anywhere)
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from backend.tiny import make_tiny  # noqa: E402
from tests.support.daemon import Wire, audit_fields  # noqa: E402
from tests.support.pair import launch_command, launched  # noqa: E402

REPS, BLOCKS, LONG = 200, 5, 300

RANK = """
import json, pickle, statistics, sys, time
import mlx.core as mx
from backend import dist
from backend.engine import Outcome
from backend.scheduler import Commands

group = mx.distributed.init()
payload = (Commands(), Outcome({}, "0123456789abcdef"))

def two(obj):  # the size, then the bytes (the other ranks contribute zeros)
    data = pickle.dumps(obj) if group.rank() == 0 else b""
    size = mx.distributed.all_sum(len(data), group=group, stream=mx.cpu).item()
    buf = mx.array(bytearray(data.ljust(size, b"\\0")), dtype=mx.uint8)
    return pickle.loads(bytes(mx.distributed.all_sum(buf, group=group, stream=mx.cpu)))

def one(obj):
    return dist.exchange(obj, group)[0][0]

times = {"one": [], "two": []}
for block in range(int(sys.argv[2]) * 2):
    name, fn = ("one", one) if block % 2 == 0 else ("two", two)
    tic = time.perf_counter()
    for _ in range(int(sys.argv[1])):
        assert fn(payload)[1].digest == "0123456789abcdef"
    times[name].append((time.perf_counter() - tic) / int(sys.argv[1]))
if group.rank() == 0:
    print(json.dumps({k: statistics.median(v) * 1e6 for k, v in times.items()}), flush=True)
"""


def exchange_figures(reps: int, blocks: int) -> dict[str, float]:
    cmd = [*launch_command([])[:-2], "-c", RANK, str(reps), str(blocks)]  # python -c, not -m backend.cli
    done = subprocess.run(
        cmd,
        cwd=REPO,
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the ranks printed no figures:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


async def serve_figures(endpoint: str, tokens: int) -> dict:
    async with Wire(endpoint, timeout=300) as wire:
        msgs = await wire.request("audit", "long", **audit_fields("long", max_tokens=tokens))
        if msgs[-1]["kind"] != "done":
            raise RuntimeError(f"the pair did not finish: {msgs[-1]}")
        return (await wire.ask("status", "s"))["status"]["engine"]["link"]


def main() -> int:
    quick = "--quick" in sys.argv[1:]  # 20 exchanges, 1 block, 30 tokens (what tests/bench runs)
    reps, blocks, long = (20, 1, 30) if quick else (REPS, BLOCKS, LONG)
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    figures = exchange_figures(reps, blocks)
    print(
        f"a decode step's exchange under mlx.launch, median of {blocks} blocks of {reps}: "
        f"one collective {figures['one']:.0f} us, two collectives {figures['two']:.0f} us"
    )
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        model = make_tiny(Path(tmp) / "tiny")
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps([{"unit": "long", "turns": [" ".join(f"v{i} = a[{i}];" for i in range(400))]}]))
        with launched(["--model", str(model), "--temp", "0", "--max-tokens", str(long), "--script", str(script)]) as p:
            link = asyncio.run(serve_figures(p.endpoint, long))
    print(
        f"serve on the pair, one request of {long} tokens: {link['turns']} steps, {link['collectives']} collectives "
        f"({link['collectives'] / link['turns']:.2f} per step), {link['ms_per_turn']:.2f} ms per step in them"
    )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(f"ratio two_collectives_over_one = {figures['two'] / figures['one']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
