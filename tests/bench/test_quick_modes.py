"""Every benchmark script has a quick mode, and it runs: a change that breaks a script fails here, not when
somebody next wants its figures. The full runs stay manual (docs/benchmarks.md); nothing here asserts a speed.

A script that needs something this tier may lack says so with its own marker below; the others run on the
tiny checkpoint (their daemons) or on the editor side alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.quick import quick_run

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("*.py"))
OWN_TESTS = {  # scripts whose quick mode has a test of its own, with more to check than a ratio line
    "backend_vs_mlx_server.py": "tests/backend/test_bench.py",
    "kbuild_agreement.py": "tests/bench/test_kbuild_agreement.py",
    "kernel_scale.py": "tests/bench/test_kernel_scale.py",
    "tool_loop.py": "tests/bench/test_tool_loop.py",
}
PAIR = {"pair_exchange.py", "pair_link.py"}  # two ranks under mlx.launch
FIGURES = {"step_profile.py": " us/token"}  # what a script prints that is not a ratio (a profile: where time goes)


def test_every_script_has_a_quick_mode():
    missing = [name for name in SCRIPTS if "--quick" not in (REPO / "bench" / name).read_text()]
    assert missing == [], f"bench scripts without --quick: {missing}"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.daemon, *([pytest.mark.pair] if name in PAIR else [])])
        for name in SCRIPTS
        if name not in OWN_TESTS
    ],
)
def test_the_quick_mode_runs_and_prints_its_figures(name):
    pytest.importorskip("mlx")  # every one of them serves the tiny checkpoint
    out = quick_run(name, timeout=900)
    figure = FIGURES.get(name, "ratio ")
    assert any(figure in line for line in out.splitlines()), out
