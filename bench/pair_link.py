"""The link between two ranks on 127.0.0.1, measured by `k3-backend doctor`: under `mlx.launch` vs started by hand.

`doctor` times `all_sum` of a scalar (latency) and of 64 MB (bandwidth) between two ring ranks. The peer is
the same two ranks started by hand (MLX_HOSTFILE + MLX_RANK on free ports, as hostfiles/README.md describes
for one launchd job per Mac), without the launcher process, whose output threads keep a core busy for as long
as the ranks run (mlx 0.32). On a 2-core machine that core is one the ranks need, so the claim is
`ratio launcher_latency_over_manual` > 1 here; on a many-core Mac the launcher's core matters far less.
Runs alternate the two configurations REPEATS times; medians are reported.

Run: `uv run python bench/pair_link.py [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support (run as a script from anywhere)
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from tests.support.pair import free_port_block, launch_command  # noqa: E402

DOCTOR = [sys.executable, "-m", "backend.cli", "doctor"]


def figures(out: str) -> tuple[float, float]:
    """(scalar all_sum latency in us, 64 MB all_sum bandwidth in GB/s) from doctor's table."""
    latency = re.search(r"all_sum latency\s*│\s*all\s*│\s*(\d+) us", out)
    bandwidth = re.search(r"all_sum 64 MB\s*│\s*all\s*│\s*([\d.]+) GB/s", out)
    if not latency or not bandwidth or "all checks passed" not in out:
        raise RuntimeError(f"doctor did not pass:\n{out[-2000:]}")
    return float(latency.group(1)), float(bandwidth.group(1))


def under_launcher() -> tuple[float, float]:
    done = subprocess.run(
        launch_command(["doctor"]), cwd=REPO, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=300
    )
    return figures(done.stdout)


def by_hand() -> tuple[float, float]:
    first = free_port_block(2)
    with tempfile.TemporaryDirectory(prefix="k3-bench-") as tmp:
        hostfile = Path(tmp) / "ring.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{first}"], [f"127.0.0.1:{first + 1}"]]))
        ranks = [
            subprocess.Popen(
                DOCTOR,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=os.environ | {"MLX_HOSTFILE": str(hostfile), "MLX_RANK": str(r)},
            )
            for r in range(2)
        ]
        outs = [p.communicate(timeout=300)[0] for p in ranks]
    return figures(outs[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="once (what tests/bench runs)")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[tuple[float, float]]] = {"launcher": [], "manual": []}
    for _ in range(args.repeats):
        runs["launcher"].append(under_launcher())
        runs["manual"].append(by_hand())
    medians = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in runs.items()}
    for name, (latency, bandwidth) in medians.items():
        print(f"{name:9s} all_sum scalar {latency:8.0f} us   64 MB {bandwidth:.2f} GB/s   (runs: {runs[name]})")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(f"ratio launcher_latency_over_manual = {medians['launcher'][0] / medians['manual'][0]:.2f}")
    print(f"ratio manual_bandwidth_over_launcher = {medians['manual'][1] / medians['launcher'][1]:.2f}")


if __name__ == "__main__":
    main()
