"""bench/tool_loop.py runs: its quick mode (one short conversation on both servers) prints every figure, so the
script cannot rot. The figures themselves are not asserted: speed lives in the bench's output, not in tests."""

import pytest

from tests.bench.quick import quick_run


@pytest.mark.daemon
def test_the_quick_run_prints_prefill_per_round_where_the_time_went_and_the_ratio():
    out = quick_run("tool_loop.py", 600)
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert all(int(r[1]) > 0 for r in rows)  # the same generated count on both sides, forced
    assert "prefilled in all: k3-backend" in out
    spent = next(line for line in out.splitlines() if line.startswith("k3-backend's engine: prefill "))
    prefill, decode = (float(spent.split(f"{phase} ")[1].split(" s")[0]) for phase in ("prefill", "decode"))
    assert prefill > 0 and decode > 0  # both phases ran for this conversation, and the status reply says so
    assert any(line.startswith("ratio tool_loop_speedup = ") for line in out.splitlines())
