"""bench/review_cost.py runs: its quick mode (a small history it builds) prints every figure, so the script cannot
rot; on that history (8 commits, each changing one function of 20) a review audits one unit per commit."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None, reason="needs the backend extra (mlx-lm)")


def test_quick_mode_prices_a_review_against_whole_files():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "review_cost.py"), "--quick"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"^commits: 8 touching C files", out, flags=re.M), out
    assert re.search(r"^review: 8 units, ", out, flags=re.M) and re.search(
        r"^whole files: 160 units, ", out, flags=re.M
    )
    (ratio,) = re.findall(r"^ratio review_token_savings = ([0-9.]+)$", out, flags=re.M)
    assert float(ratio) > 1
