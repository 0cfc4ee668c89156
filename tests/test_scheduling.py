"""The order in which the two xdist workers take the test files (tests/conftest.py, ``pytest_collection_modifyitems``):
the pair group first, then the other groups known to be long, then those that need a daemon or an editor, then the
rest; most tests first within each.

With its default ``--loadscope-reorder``, xdist sorted the groups by their number of tests and undid that order: the
pair group (31 tests) and the long groups of few tests (the VS Code workbench, the concurrent front ends) ran
wherever their counts put them, some at the very end, while the other worker had nothing left to do.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import FIRST_IN_GROUP, LONG_GROUPS, REPO

PAIR = "tests/pair/test_supervise.py"
LONG = "tests/batch/test_concurrent.py"  # 4 tests, about 2 minutes: LONG_GROUPS
DAEMON = "tests/batch/test_tiny.py"  # one test, on a daemon serving the tiny checkpoint
MANY = "tests/lsp/test_units.py"  # many quick tests
OTHER = "tests/lsp/test_diffing.py"  # more quick tests


def test_xdist_keeps_the_order_the_conftest_gives(pytestconfig):
    assert pytestconfig.getoption("loadscopereorder") is False


def test_the_pair_group_comes_first_then_the_long_groups_then_the_daemons_then_the_rest():
    """Collected in the order given here (many quick tests first): scheduled pair, long, a group that starts a
    daemon (however few its tests), then the quick ones."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "--co", "-q", MANY, DAEMON, LONG, PAIR],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    files = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    assert list(dict.fromkeys(files)) == [PAIR, LONG, DAEMON, MANY], files


def test_the_extensions_build_comes_first_in_the_vscode_group():
    """editors/vscode/ci.sh (test_vscode.py) packages the .vsix the workbench tests install; run after them, it built
    the extension a second time (npm ci and the package) in every fresh clone."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "--co", "-q", "tests/editors"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    files = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    vscode = [f for f in dict.fromkeys(files) if "vscode" in f.rsplit("/", 1)[-1]]
    assert vscode[0] == "tests/editors/test_vscode.py" and len(vscode) == 4, vscode
    assert [f for f in FIRST_IN_GROUP if not (REPO / "tests" / f).exists()] == []


def test_every_long_group_is_a_group_of_this_suite():
    """A long group renamed or moved would silently fall back to xdist's place for it."""
    groups = {"pair", "vscode"} | {
        p.relative_to(REPO / "tests").as_posix() for p in (REPO / "tests").rglob("test_*.py")
    }
    assert [g for g in LONG_GROUPS if g not in groups] == []


def test_a_files_tests_all_run_in_one_worker():
    """The groups reach xdist's scheduler. pytest 9.2 keeps a node id where xdist 3.8 cannot append the group
    (``item._nodeid``), so every test became its own group: a file's tests were spread over both workers, its
    module daemons started in each, and the two VS Code tests built one directory at once (CI failed on that)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-v", "-p", "no:cacheprovider", MANY, OTHER],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    workers: dict[str, set[str]] = {}
    for m in re.finditer(r"^\[(gw\d+)\] .*?PASSED (\S+?)::", done.stdout, flags=re.M):
        workers.setdefault(m[2], set()).add(m[1])
    assert set(workers) == {MANY, OTHER} and all(len(w) == 1 for w in workers.values()), workers
