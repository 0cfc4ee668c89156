"""A hostile repository runs nothing during `k3lsp review`: its hooks, `core.fsmonitor`, `diff.external`, a textconv
driver, clean/smudge/process filters and `core.pager` would each leave a marker file if they ran. First the traps
are shown to work (plain `git` the naive way runs each of them), then every mode of `k3lsp review` reads the same
repository and no marker appears. A work tree its config names elsewhere (`core.worktree`) is not used (more in
test_repo_confinement.py), and (as root) a repository another user owns is refused, as git's safe.directory
check refuses it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.review import repos
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere

TRAPS = ("hook", "fsmonitor", "external", "textconv", "clean", "smudge", "process", "pager")
STAGED = repos.DRIVER_PATCHED.replace("\treturn v;", "\treturn v + 2;")
HOOKS = ("pre-commit", "post-checkout", "post-index-change", "applypatch-msg", "pre-applypatch", "post-applypatch")


def hostile(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """(repository, its markers folder, an mbox of its last commit): a driver patch, committed, then traps set."""
    root = repos.repository(tmp_path / name, {"drv.c": repos.DRIVER_C})
    repos.commit(root, {"drv.c": repos.DRIVER_PATCHED}, "drv: copy the whole request")
    box = tmp_path / f"{name}.mbx"
    box.write_text(repos.git(root, "format-patch", "--stdout", "-1") + "\n")
    repos.write(root, {"drv.c": STAGED})
    repos.git(root, "add", "drv.c")  # staged before the traps are set
    markers = tmp_path / f"{name}-markers"
    markers.mkdir()
    bin_dir = tmp_path / f"{name}-bin"
    bin_dir.mkdir()

    def trap(what: str, passes: str = "cat") -> str:
        script = bin_dir / f"trap-{what}"
        script.write_text(f'#!/bin/sh\ntouch "{markers}/{what}"\n{passes}\n')
        script.chmod(0o755)
        return str(script)

    for hook in HOOKS:
        (root / ".git" / "hooks" / hook).write_text(f'#!/bin/sh\ntouch "{markers}/hook"\n')
        (root / ".git" / "hooks" / hook).chmod(0o755)
    config = {
        "core.fsmonitor": trap("fsmonitor", "exit 0"),
        "diff.external": trap("external", "exit 0"),
        "diff.evil.textconv": trap("textconv", 'cat "$1"'),
        "filter.evil.clean": trap("clean"),
        "filter.evil.smudge": trap("smudge"),
        "filter.proc.process": trap("process", "exit 1"),
        "core.pager": trap("pager"),
    }
    for key, value in config.items():
        repos.git(root, "config", key, value)
    (root / ".gitattributes").write_text("*.c diff=evil filter=evil\n*.h filter=proc\n")
    (root / "drv.c").write_text(STAGED + "/* edited */\n")  # a work-tree change for the filters
    (root / "new.h").write_text("int new_one(void);\n")
    return root, markers, box


def fired(markers: Path) -> set[str]:
    return {p.name for p in markers.iterdir()}


def test_the_traps_work_when_git_is_run_the_naive_way(tmp_path):
    """What a naive reviewer's tool would run: each trap fires (so the test below could fail)."""
    root, markers, box = hostile(tmp_path, "naive")
    env = os.environ | {"GIT_PAGER": "", "PAGER": ""}
    for command in (
        ["diff", "HEAD"],  # fsmonitor, diff.external, the clean filter
        ["-c", "core.pager=", "diff", "--no-ext-diff", "HEAD~1", "HEAD"],  # textconv
        ["add", "new.h"],  # the process filter
        ["stash"],  # smudge when the work tree is restored, post-checkout
        ["am", str(box)],  # applying a series: applypatch hooks
    ):
        subprocess.run(["git", "-C", str(root), *repos.IDENTITY, *command], capture_output=True, env=env, timeout=60)
    subprocess.run(["script", "-qc", f"git -C {root} log -1 -p", "/dev/null"], capture_output=True, timeout=60)  # pager
    assert fired(markers) == set(TRAPS)


@pytest.mark.parametrize(
    "mode",
    [["HEAD"], ["HEAD~1..HEAD"], ["--staged"], [], ["--base", "HEAD~1"], ["--patch", "MBOX", "--base", "HEAD~1"]],
    ids=["commit", "range", "staged", "worktree", "base", "mbox"],
)
def test_k3lsp_review_runs_none_of_them(tmp_path, mode):
    root, markers, box = hostile(tmp_path, "hostile")
    repos.git(root, "config", "core.fsmonitor", str(tmp_path / "hostile-bin" / "trap-fsmonitor"))  # after the add
    args = [str(box) if a == "MBOX" else a for a in mode]
    done = k3lsp(
        "review", *args, "--callers", "-C", str(root), "--endpoint", nowhere(tmp_path), "--json",
        cache=tmp_path / "cache", cwd=root, env={"PAGER": str(tmp_path / "hostile-bin" / "trap-pager")},
    )  # fmt: skip
    assert done.returncode == 2 and "units not audited: no daemon left" in done.stderr, done.stderr  # read, not sent
    assert fired(markers) == set()


def test_a_work_tree_the_config_names_elsewhere_is_not_used(tmp_path):
    """`core.worktree` naming a folder with C in it: `k3lsp review` reviews the repository's own work tree."""
    root, _, _ = hostile(tmp_path, "moved")
    elsewhere = tmp_path / "home"
    repos.write(elsewhere, {"leak.c": "int leak(void)\n{\n\treturn 0;\n}\n"})
    repos.git(root, "config", "core.worktree", str(elsewhere))
    done = k3lsp(
        "review", "-C", str(root), "--endpoint", nowhere(tmp_path), "--json", cache=tmp_path / "c", cwd=tmp_path
    )
    report = json.loads(done.stdout)
    assert report["root"] == str(root.resolve()), done.stderr
    assert {u["path"] for p in report["patches"] for u in p["units"]} == {"drv.c"}


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chown") is None, reason="needs root to give the repository away")
def test_a_repository_another_user_owns_is_refused(tmp_path):
    root = repos.repository(tmp_path / "theirs", {"drv.c": repos.DRIVER_C})
    subprocess.run(["chown", "-R", "nobody", str(root)], check=True)
    done = k3lsp("review", "HEAD", "-C", str(root), "--endpoint", nowhere(tmp_path), cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 2 and "not owned by current user" in done.stderr
