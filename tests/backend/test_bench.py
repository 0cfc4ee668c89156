"""bench/backend_vs_mlx_server.py keeps working: its --quick mode (tiny inputs, one repeat) against a real
mlx_lm.server, with the curve drawn. The speed it prints is not asserted (speed lives in bench/)."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_mode_prints_a_ratio_per_scenario_and_draws_the_curve(tmp_path):
    png = tmp_path / "curve.png"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "backend_vs_mlx_server.py"), "--quick", "--png", str(png)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ratios = dict(re.findall(r"^ratio (\S+) = ([0-9.]+)", run.stdout, re.M))
    assert set(ratios) == {"sequential[tiny]", "concurrent_1[tiny]", "concurrent_2[tiny]"}, run.stdout
    assert all(float(x) > 0 for x in ratios.values())
    # both servers read the same prompt (the script checks it too) and generated what was asked of them
    prompts = re.findall(r"^  (k3-backend|mlx_lm.server): (\d+) prompt tokens per request", run.stdout, re.M)
    assert len(prompts) == 2 and prompts[0][1] == prompts[1][1]
    assert png.stat().st_size > 0
