"""The two-rank tensor-parallel candidate (mlx.launch, ring backend on 127.0.0.1) against its single self."""

import json
import re
import subprocess

import pytest

from backend.fidelity.compare import compare
from backend.fidelity.store import Base
from tests.fidelity.conftest import WINDOW
from tests.support.pair import REPO, launch_command

pytestmark = pytest.mark.pair  # two ranks, outside tests/pair


def test_two_ranks_match_one_process(tiny_model, tiny_base):
    cmd = launch_command(
        ["fidelity", "compare", "--trust-remote-code", "--model", str(tiny_model), "--base", str(tiny_base), "--json"]
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)  # rank 0 alone prints
    assert report["candidate"]["ranks"] == 2
    rows = [*report["corpora"].values(), *report["spans"].values()]
    assert all(row["tokens"] > 0 for row in rows)
    for row in rows:
        assert row["kld_mean"] < 1e-6 and row["kld_median"] < 1e-6
        assert abs(row["ppl_ratio"] - 1.0) < 1e-4
        assert row["top1_agreement"] >= 0.99  # only near-ties of the random model may flip


def test_a_base_recorded_by_two_ranks_matches_one_process(tiny_model, tiny_base, trace_file, tmp_path):
    out_path = tmp_path / "pair.k3fb"
    cmd = launch_command(
        [
            "fidelity",
            "record",
            "--trust-remote-code",
            "--model",
            str(tiny_model),
            "--traces",
            str(trace_file),
            "--top-k",
            "16",
            "--chunk",
            "96",
            "--window",
            str(WINDOW),
            "-o",
            str(out_path),
        ]
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert out.returncode == 0 and out.stdout.count(f"wrote {out_path}") == 1, out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pair.k3fb"]
    pair, single = Base(out_path), Base(tiny_base)
    assert pair.ids(0) == single.ids(0) and pair.header.windows[0] == single.header.windows[0]
    report = compare(str(tiny_model), str(out_path), trust_remote_code=True)
    assert report["spans"]["all"]["tokens"] == single.header.windows[0].tokens - 1
    assert all(row["kld_mean"] < 1e-6 for row in report["spans"].values())


def test_a_refused_base_stops_both_ranks_with_the_reason(tiny_model, tiny_base, tmp_path):
    broken = tmp_path / "broken.k3fb"
    data = bytearray(tiny_base.read_bytes())
    data[len(data) // 2] ^= 1
    broken.write_bytes(bytes(data))
    cmd = launch_command(
        ["fidelity", "compare", "--trust-remote-code", "--model", str(tiny_model), "--base", str(broken)]
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    # mlx.launch itself exits 0 whatever its ranks do; it logs their exit codes. The first rank to exit
    # exits 2; the launcher may then stop the other one before it does.
    logs = out.stdout + out.stderr
    assert "corrupt BASE: checksum mismatch" in logs
    assert re.search(r"rank [01] exited with code 2", logs) and "exited with code 0" not in logs
    assert "Traceback" not in logs and "Perplexity" not in logs
