"""`k3lsp audit` as a real process against a real scripted `k3-backend`: output, cache reuse, JSON, exit statuses."""

from __future__ import annotations

import json
import subprocess

from tests.lsp import scripted
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere


def k3lsp_audit(*args: str, cache, cwd) -> subprocess.CompletedProcess:
    return k3lsp("audit", *args, cache=cache, cwd=cwd)


def stats_line(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_findings_print_like_a_compiler_and_a_rerun_is_served_from_the_cache(daemon, tmp_path):
    root = scripted.workspace(tmp_path)
    (root / "slow.c").unlink()  # 3000 forced tokens: not needed here
    first = k3lsp_audit("ws", "--endpoint", daemon.endpoint, cache=tmp_path / "c", cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    lines = first.stdout.strip().splitlines()
    assert lines[:-1] == [
        "ws/demo.c:9:2: high CWE-787 memcpy overflows buf",
        "ws/demo.c:15:2: medium CWE-129 unchecked index",
    ]
    assert stats_line(first.stdout).startswith(
        "k3lsp audit: 2 files, 3 units, 3 audited, 0 cached, 0 failed, 2 findings"
    )

    again = k3lsp_audit("ws", "--endpoint", daemon.endpoint, cache=tmp_path / "c", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stdout.strip().splitlines()[:-1] == lines[:-1]
    assert "3 units, 0 audited, 3 cached" in stats_line(again.stdout)


def test_json_output_severity_threshold_and_clean_exit(daemon, tmp_path):
    root = scripted.workspace(tmp_path)
    result = k3lsp_audit(str(root / "demo.c"), "--endpoint", daemon.endpoint, "--json", cache=tmp_path / "c", cwd=root)
    body = json.loads(result.stdout)
    assert result.returncode == 1
    assert [(f["path"], f["line"], f["cwe"], f["unit"]) for f in body["findings"]] == [
        ("demo.c", 9, 787, "copy_msg"),
        ("demo.c", 15, 129, "get_slot"),
    ]
    assert all(len(f["fingerprint"]) == 32 for f in body["findings"])
    assert body["stats"]["audited"] == 2 and body["stats"]["tokens"] > 0

    high = k3lsp_audit(
        "demo.c", "--endpoint", daemon.endpoint, "--min-severity", "high", cache=tmp_path / "c", cwd=root
    )
    assert [line.split(": ", 1)[0] for line in high.stdout.strip().splitlines()[:-1]] == ["demo.c:9:2"]

    clean = k3lsp_audit("leaky.c", "--endpoint", daemon.endpoint, cache=tmp_path / "c", cwd=root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 findings" in stats_line(clean.stdout)


def test_unreachable_daemon_and_missing_path_exit_2_with_a_clear_error(tmp_path):
    root = scripted.workspace(tmp_path)
    endpoint = nowhere(tmp_path)
    result = k3lsp_audit("demo.c", "nope.c", "--endpoint", endpoint, cache=tmp_path / "c", cwd=root)
    assert result.returncode == 2
    assert "nope.c: no such file or directory" in result.stderr
    assert f"{endpoint} is not reachable" in result.stderr
