"""The link between two ranks on 127.0.0.1, measured by `k3-backend doctor`: under `mlx.launch`, under `k3-launch`
and started by hand.

`doctor` times `all_sum` of a scalar (latency) and of 64 MB (bandwidth) between two ring ranks. `mlx.launch`
(mlx 0.32) keeps a core busy for as long as the ranks run (its output threads wait to write to pipes that are
always writable); `k3-launch` is mlx.launch without those loops (backend/launcher.py); the third configuration
is the same two ranks started by hand (MLX_HOSTFILE + MLX_RANK on free ports, as hostfiles/README.md describes
for one launchd job per Mac), without any launcher. On a 2-core machine the busy core is one the ranks need, so
the claims are `ratio mlx_launch_latency_over_k3_launch` > 1 and `ratio k3_launch_latency_over_manual` near 1
here; on a many-core Mac the busy core matters far less. Runs alternate the configurations REPEATS times;
medians are reported.

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
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support (run as a script from anywhere)
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from tests.support.pair import LAUNCH, free_port_block, launch_command  # noqa: E402

MLX_LAUNCH = str(Path(sys.executable).parent / "mlx.launch")

DOCTOR = [sys.executable, "-m", "backend.cli", "doctor"]


def figures(out: str) -> tuple[float, float]:
    """(scalar all_sum latency in us, 64 MB all_sum bandwidth in GB/s) from doctor's table."""
    latency = re.search(r"all_sum latency\s*│\s*all\s*│\s*(\d+) us", out)
    bandwidth = re.search(r"all_sum 64 MB\s*│\s*all\s*│\s*([\d.]+) GB/s", out)
    if not latency or not bandwidth or "all checks passed" not in out:
        raise RuntimeError(f"doctor did not pass:\n{out[-2000:]}")
    return float(latency.group(1)), float(bandwidth.group(1))


def under(launcher: str) -> Callable[[], tuple[float, float]]:
    def run() -> tuple[float, float]:
        command = launch_command(["doctor"], launcher=launcher)
        done = subprocess.run(command, cwd=REPO, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=300)
        return figures(done.stdout)

    return run


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
    configurations = {"mlx.launch": under(MLX_LAUNCH), "k3-launch": under(LAUNCH), "manual": by_hand}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in configurations}
    for _ in range(args.repeats):
        for name, measure in configurations.items():
            runs[name].append(measure())
    medians = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in runs.items()}
    for name, (latency, bandwidth) in medians.items():
        print(f"{name:10s} all_sum scalar {latency:8.0f} us   64 MB {bandwidth:.2f} GB/s   (runs: {runs[name]})")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    mlx, k3, manual = (medians[name] for name in configurations)
    print(f"ratio mlx_launch_latency_over_k3_launch = {mlx[0] / k3[0]:.2f}")
    print(f"ratio k3_launch_latency_over_manual = {k3[0] / manual[0]:.2f}")
    print(f"ratio k3_launch_bandwidth_over_mlx_launch = {k3[1] / mlx[1]:.2f}")


if __name__ == "__main__":
    main()
