"""Two tensor-parallel ranks of the engine (ring backend on 127.0.0.1) produce what one process does.

The ranks are started by hand with a hostfile of free ports (MLX_HOSTFILE/MLX_RANK, as `mlx.launch` sets
them) so parallel test runs cannot collide on mlx.launch's fixed default port.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.support.pair import free_port_block

pytestmark = pytest.mark.pair  # two ranks, outside tests/pair


def start(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.tp_engine", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen, timeout: float = 180.0) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("rank did not finish in time")
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_two_ranks_match_one_process(tiny_model, tmp_path):
    model = str(tiny_model)
    hostfile = tmp_path / "ring.json"
    first = free_port_block(2)
    hostfile.write_text(json.dumps([[f"127.0.0.1:{p}"] for p in (first, first + 1)]))
    ranks = [start([model], os.environ | {"MLX_HOSTFILE": str(hostfile), "MLX_RANK": str(r)}) for r in range(2)]
    single = start([model, "--single"], dict(os.environ))
    try:
        r0, r1, one = result(ranks[0]), result(ranks[1]), result(single)
    finally:
        for p in [*ranks, single]:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert (r0["rank"], r1["rank"], r0["ranks"], one["ranks"]) == (0, 1, 2, 1)
    assert r0["finish"] == {"0": "length", "1": "stop", "2": "cancelled"}
    assert r0["texts"]["1"] == "safe" and len(r0["texts"]["0"]) > 0
    assert r0["texts"] == r1["texts"] == one["texts"]
    assert r0["finish"] == r1["finish"] == one["finish"]
