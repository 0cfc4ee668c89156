"""bench/kernel_scale.py on a tree that defines none of the symbols it looks up reports that, and goes on: it
used to divide by zero (issue 39); on a tree with no C file at all it says so in one sentence (it used to fail
with an IndexError)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.bench.quick import REPO
from tests.bench.test_kernel_scale import UNIVERSAL


def kernel_scale(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "kernel_scale.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )


@pytest.mark.skipif(not UNIVERSAL, reason="needs universal-ctags: apt-get install universal-ctags (brew on macOS)")
def test_a_tree_without_its_symbols_says_so(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "alone.c").write_text("int alone(int n)\n{\n\treturn n + 1;\n}\n")
    done = kernel_scale(str(tree), "--only", "tools")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no symbols found: none of the 25 looked up is defined in this tree (per ctags)" in done.stdout
    assert "find_definition_found" not in done.stdout


def test_a_tree_without_c_files_says_so(tmp_path):
    (tmp_path / "README").write_text("no C here\n")
    done = kernel_scale(str(tmp_path))
    assert done.returncode == 2
    assert done.stderr == (
        f"kernel_scale.py: {tmp_path} has no C file the default include/exclude admits: nothing to measure\n"
    )
