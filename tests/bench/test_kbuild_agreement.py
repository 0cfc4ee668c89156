"""bench/kbuild_agreement.py runs: its quick mode (a small kernel-like tree it builds) has GNU make compute the
objects kbuild builds and compares our reading (k3lsp.kbuild) with them, so the script cannot rot."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.bench.quick import quick_run

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed (kbuild's side)")


def test_quick_mode_agrees_with_make_on_every_file():
    out = quick_run("kbuild_agreement.py", 120)
    assert re.search(r"^kbuild \(GNU make\): 7 directories, 9 objects in", out, flags=re.M), out
    assert re.search(r"^ours: 7 directories, 9 objects in .* \(again from the cache: ", out, flags=re.M), out
    assert "our files: built-in 7, module 2, not built 5, unknown 1" in out
    assert re.search(r"^ratio kbuild_agreement = 1\.000000 \(11 of 11 files\)$", out, flags=re.M), out
    assert re.search(r"^disagreements: 0$", out, flags=re.M), out
    assert re.search(r"^our units: built-in 6, module 2, not built 5, unknown 1 \(14 units of 14 \.c files", out, re.M)
