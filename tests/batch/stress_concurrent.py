"""By hand, never in CI: rounds of concurrent `k3lsp audit` runs on one real daemon, counting the runs that hang.

    uv run --all-extras python -m tests.batch.stress_concurrent [--rounds 20] [--runs 8] [--bound 120]

Each round starts ``--runs`` processes at once on examples/*.c (so several audit the same file) with one result
cache shared by the round, against one `k3-backend serve` on a tiny random checkpoint (``--max-tokens`` 256:
most audits are cut short) with the daemon's own per-client limit (16 open requests), as issue 39 reported them.
A run still going after ``--bound`` seconds is killed and counted as hung. One line per round, then the total;
the exit status is 1 when any run hung.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.batch import test_concurrent as concurrent
from tests.support.daemon import serving


async def one_round(endpoint: str, tree: Path, cache: Path, runs: int) -> list[tuple[int | None, float]]:
    """(exit status or None when hung, seconds) of each run of one round."""

    async def timed(name: str) -> tuple[int | None, float]:
        tic = time.monotonic()
        code, _, _ = await concurrent.ended("audit", name, "--endpoint", endpoint, "--json", cache=cache, cwd=tree)
        return code, time.monotonic() - tic

    return await asyncio.gather(*(timed(concurrent.FILES[i % len(concurrent.FILES)]) for i in range(runs)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=8, help="concurrent `k3lsp audit` processes per round")
    parser.add_argument("--bound", type=float, default=120.0, help="seconds before a run counts as hung")
    parser.add_argument("--max-tokens", default="256", help="the daemon's budget per audit")
    args = parser.parse_args()
    concurrent.BOUND = args.bound
    from backend.tiny import make_tiny  # here: the module imports without the backend extra

    with tempfile.TemporaryDirectory(prefix="k3stress-") as tmp:
        root = Path(tmp)
        tree = root / "tree"
        tree.mkdir()
        for path in concurrent.EXAMPLES.glob("k3demo*"):
            shutil.copy(path, tree / path.name)
        hung = 0
        with serving(make_tiny(root / "tiny"), args=["--max-tokens", args.max_tokens]) as daemon:
            for n in range(1, args.rounds + 1):
                outcomes = asyncio.run(one_round(daemon.endpoint, tree, root / f"cache{n}", args.runs))
                stuck = sum(code is None for code, _ in outcomes)
                hung += stuck
                codes = sorted({code for code, _ in outcomes if code is not None})
                slowest = max(seconds for _, seconds in outcomes)
                print(f"round {n}: {args.runs} runs, {stuck} hung, exit statuses {codes}, slowest {slowest:.0f} s")
        print(f"total: {args.rounds * args.runs} runs, {hung} hung")
    return 1 if hung else 0


if __name__ == "__main__":
    sys.exit(main())
