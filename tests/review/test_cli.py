"""`k3lsp review` as a process against a real scripted `k3-backend serve` (the answers forced through the real
engine): an unchecked copy_from_user length is one introduced finding, the exit status follows --fail-on, and
every format is what it says (SARIF against the official schema)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.kbuild import trees
from tests.review import repos
from tests.support.batch import k3lsp

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())


@pytest.fixture
def driver(tmp_path) -> Path:
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C})
    repos.commit(root, {"drv.c": repos.DRIVER_PATCHED}, "drv: copy the whole request")
    return root


def review(daemon, root: Path, *args: str, cache: Path):
    return k3lsp("review", "--endpoint", daemon.endpoint, "-C", str(root), *args, cache=cache, cwd=root)


def test_an_unchecked_copy_from_user_length_is_one_introduced_finding(daemon, driver, tmp_path):
    done = review(daemon, driver, "HEAD", "--json", cache=tmp_path / "c")
    assert done.returncode == 1, done.stderr
    (patch,) = json.loads(done.stdout)["patches"]
    introduced = [f for f in patch["findings"] if f["introduced"]]
    assert [(f["cwe"], f["line"], f["why"]) for f in introduced] == [
        (787, repos.line_of(repos.DRIVER_PATCHED, "copy_from_user"), "lines")
    ]
    assert [(f["cwe"], f["introduced"]) for f in patch["findings"]] == [(787, True), (125, False)]
    assert sorted(u["unit"] for u in patch["units"]) == ["drv_index", "drv_read"]


def test_the_exit_status_follows_fail_on_and_the_work_tree_is_reviewed_too(daemon, driver, tmp_path):
    cache = tmp_path / "c"
    assert review(daemon, driver, "HEAD", "--fail-on", "high", cache=cache).returncode == 1
    assert review(daemon, driver, "HEAD", "--fail-on", "critical", cache=cache).returncode == 0
    repos.git(driver, "reset", "-q", "--soft", "HEAD~1")  # the patch, staged and in the work tree
    staged = review(daemon, driver, "--staged", "--json", cache=cache)
    worktree = review(daemon, driver, "--json", cache=cache)
    for done in (staged, worktree):
        assert done.returncode == 1, done.stderr
        assert [f["cwe"] for f in json.loads(done.stdout)["patches"][0]["findings"] if f["introduced"]] == [787]
    text = review(daemon, driver, cache=cache)
    assert "introduced:" in text.stdout and "drv.c:" in text.stdout and text.returncode == 1


def test_sarif_validates_and_carries_the_baseline_state_per_patch(daemon, driver, tmp_path):
    repos.commit(driver, {"drv.c": repos.DRIVER_PATCHED.replace("\treturn v;", "\treturn v - 1;")}, "drv: second")
    out = tmp_path / "review.sarif"
    done = review(daemon, driver, "HEAD~2..HEAD", "--format", "sarif", "-o", str(out), cache=tmp_path / "c")
    assert done.returncode == 1, done.stderr
    log = json.loads(out.read_text())
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    first, second = log["runs"]
    assert [(r["ruleId"], r["baselineState"]) for r in first["results"]] == [
        ("CWE-787", "new"),
        ("CWE-125", "unchanged"),
    ]
    assert [(r["ruleId"], r["baselineState"]) for r in second["results"]] == [("CWE-125", "unchanged")]
    one = tmp_path / "range.sarif"
    review(
        daemon,
        driver,
        "HEAD~2..HEAD",
        "--format",
        "sarif",
        "--sarif-runs",
        "range",
        "-o",
        str(one),
        cache=tmp_path / "c",
    )
    (run,) = json.loads(one.read_text())["runs"]
    assert len(run["results"]) == 3


def test_the_email_reply_is_plain_text_with_the_comment_under_the_line(daemon, driver, tmp_path):
    done = review(daemon, driver, "HEAD", "--format", "email", cache=tmp_path / "c")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "Subject: Re: [PATCH] drv: copy the whole request"
    at = lines.index("> +\tif (copy_from_user(r->buf, from, r->len + n))")
    assert lines[at + 2].startswith("k3-audit: high, CWE-787")


def test_a_bad_revision_is_an_error_not_a_crash(daemon, driver, tmp_path):
    done = review(daemon, driver, "no-such-ref", cache=tmp_path / "c")
    assert done.returncode == 2 and "is not a commit" in done.stderr


# A kernel tree around the driver: drv_index built only with CONFIG_DRV_INDEX, which .config leaves unset.
KERNEL = trees.layout("drivers/", "CONFIG_DRV=y\n# CONFIG_DRV_INDEX is not set\n") | {
    "drivers/Makefile": "obj-y += drv.o\n"
}


def guarded(text: str) -> str:
    return text.replace("static int drv_index", "#ifdef CONFIG_DRV_INDEX\nstatic int drv_index").replace(
        "static int drv_ioctl", "#endif\n\nstatic int drv_ioctl"
    )


def test_only_built_reviews_no_unbuilt_unit_and_says_how_many_it_skipped(daemon, tmp_path):
    root = repos.repository(tmp_path / "linux", KERNEL | {"drivers/drv.c": guarded(repos.DRIVER_C)})
    repos.commit(root, {"drivers/drv.c": guarded(repos.DRIVER_PATCHED)}, "drv: copy the whole request")
    reason = f"line {repos.line_of(guarded(repos.DRIVER_PATCHED), 'CONFIG_DRV_INDEX')}: `#ifdef CONFIG_DRV_INDEX`"
    seen = review(daemon, root, "HEAD", "--kconfig", ".config", "--json", cache=tmp_path / "c")
    (patch,) = json.loads(seen.stdout)["patches"]
    assert sorted(u["unit"] for u in patch["units"]) == ["drv_index", "drv_read"]  # without --only-built: both
    states = {f["unit"]: (f["kconfig_state"], f["kconfig_reason"]) for f in patch["findings"]}
    assert states == {
        "drv_read": ("built-in", ""),
        "drv_index": ("not built", f"{reason} (CONFIG_DRV_INDEX is not set)"),
    }
    done = review(daemon, root, "HEAD", "--kconfig", ".config", "--only-built", "--json", cache=tmp_path / "c2")
    assert done.returncode == 1, done.stderr
    (patch,) = json.loads(done.stdout)["patches"]
    assert [u["unit"] for u in patch["units"]] == ["drv_read"]  # drv_index was never sent
    assert [f["cwe"] for f in patch["findings"]] == [787]
    assert f"1 of 2 units not built, skipped (--only-built, unbuilt: hide): 1 in drivers/drv.c ({reason}" in done.stderr
    bad = review(daemon, root, "HEAD", "--kconfig", "missing.config", cache=tmp_path / "c3")
    assert bad.returncode == 2 and f"kconfig '{root / 'missing.config'}' cannot be read" in bad.stderr
