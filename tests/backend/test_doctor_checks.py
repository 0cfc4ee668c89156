"""doctor's wired-memory, checkpoint-identity and RDMA decisions, on values recorded on Macs.

Recorded: an M5 Max with 128 GB on macOS 26 reports a Metal recommended working set of 107.52 GiB by default
and 112.00 GiB with `iogpu.wired_limit_mb=114688` (antirez/ds4#893); `ibv_devices` prints a header, a rule,
then one device per line (MLX's jaccl documentation); an M3 Ultra Mac Studio with 512 GB runs macOS 26.3.1.
"""

from __future__ import annotations

from backend import doctor_checks as dc

GIB = 1 << 30
M5_MAX_128 = {"memory_size": 128 * GIB, "max_recommended_working_set_size": int(107.52 * GIB)}
IBV_DEVICES = """\
    device                 node GUID
    ------              ----------------
    rdma_en2            8096a9d9edbaac05
    rdma_en3            8196a9d9edbaac05
    rdma_en5            8396a9d9edbaac05
"""


def test_weights_over_the_default_cap_fail_with_the_sysctl_that_fixes_it():
    verdict = dc.wired_memory("Darwin", 100 * GIB, 0.10, M5_MAX_128, None)
    assert not verdict.ok
    assert verdict.result.startswith("107.5 GiB (macOS default (iogpu.wired_limit_mb not set)) for 100.0 GiB")
    assert "sudo sysctl iogpu.wired_limit_mb=114688" in verdict.result  # 128 GiB less 16 for macOS


def test_the_raised_cap_passes_and_says_where_it_comes_from():
    raised = M5_MAX_128 | {"max_recommended_working_set_size": 112 * GIB}
    verdict = dc.wired_memory("Darwin", 100 * GIB, 0.10, raised, 114688)
    assert verdict.ok and verdict.result.startswith("112.0 GiB (iogpu.wired_limit_mb=114688)"), verdict
    assert dc.wired_memory("Darwin", 90 * GIB, 0.10, M5_MAX_128, None).ok  # 99 GiB fit under the default


def test_a_share_larger_than_the_mac_cannot_be_fixed_by_the_cap():
    verdict = dc.wired_memory("Darwin", 200 * GIB, 0.10, M5_MAX_128, None)
    assert not verdict.ok and "too little memory" in verdict.result


def test_the_wired_check_does_not_apply_off_macos():
    verdict = dc.wired_memory("Linux", 100 * GIB, 0.10, {}, None)
    assert verdict.ok and verdict.result.startswith("does not apply on Linux")
    assert not dc.wired_memory("Darwin", GIB, 0.10, {}, None).ok  # a Mac that reports nothing is not waved through


def test_rdma_needs_macos_26_2_and_a_device():
    devices = dc.parse_ibv_devices(IBV_DEVICES)
    assert devices == ["rdma_en2", "rdma_en3", "rdma_en5"]
    assert dc.rdma("Darwin", "26.3.1", devices).ok
    old = dc.rdma("Darwin", "15.6.1", devices)
    assert not old.ok and "needs macOS 26.2 or later" in old.result
    assert not dc.rdma("Darwin", "26.1", devices).ok
    none = dc.rdma("Darwin", "26.2", dc.parse_ibv_devices("    device                 node GUID\n    ------   ---\n"))
    assert not none.ok and "rdma_ctl enable" in none.result
    assert dc.rdma("Linux", None, None).ok
    assert dc.uses_jaccl({"MLX_JACCL_COORDINATOR": "10.0.1.1:32323"}) and not dc.uses_jaccl({"MLX_RANK": "0"})


def test_checkpoint_reports_are_compared_file_by_file(tiny_model, tmp_path):
    same = dc.checkpoint_report(str(tiny_model))
    assert dc.same_checkpoint([same, dict(same)]).ok
    changed = dict(same) | {"model.safetensors": "size=100", "config.json": "0" * 64}
    del changed["tokenizer.json"]
    verdict = dc.same_checkpoint([same, changed])
    assert not verdict.ok
    assert verdict.result.startswith("rank 1 differs from rank 0 in config.json (sha256 ")
    assert "model.safetensors (size=" in verdict.result and "vs size=100)" in verdict.result
    assert "tokenizer.json (sha256 " in verdict.result and " vs missing)" in verdict.result
    missing = dc.same_checkpoint([same, dc.checkpoint_report(str(tmp_path))])
    assert not missing.ok and "rank 1: " in missing.result and "no config.json" in missing.result


def test_the_ranks_mlx_and_mlx_lm_versions_are_compared():
    fits = "mlx 0.32.4, mlx-lm 0.32.2: the overrides fit"
    same = dc.same_mlx([fits, fits])
    assert same.ok and same.result == f"{fits} (on 2 ranks)"
    other = "mlx 0.33.0, mlx-lm 0.33.1: 4 of 4 overrides off, mlx-lm's public paths (slower)"
    differ = dc.same_mlx([fits, other])
    assert not differ.ok and f"rank 0: {fits}" in differ.result and f"rank 1: {other}" in differ.result
