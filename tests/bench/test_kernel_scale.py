"""bench/kernel_scale.py runs: its quick mode (a small tree it builds) prints every figure, so the script
cannot rot; on that tree every ctags function line is covered and no unit is misnamed."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.bench.quick import quick_run

CTAGS = shutil.which("ctags")
UNIVERSAL = CTAGS is not None and b"Universal Ctags" in subprocess.run([CTAGS, "--version"], capture_output=True).stdout


@pytest.fixture(scope="module")
def quick() -> str:
    """The output of one quick run, shared by the tests of this module."""
    return quick_run("kernel_scale.py", 300)


def figure(out: str, name: str) -> float:
    (value,) = re.findall(rf"^(?:ratio )?{name} = ([0-9.]+)$", out, flags=re.M)
    return float(value)


def test_quick_mode_prints_the_split_figures(quick):
    out = quick
    assert re.search(r"^split: 26 files, .* units in [0-9.]+ s .*; 2 files read as C\+\+", out, flags=re.M), out
    assert figure(out, "split_over_parse") > 0 and figure(out, "split_1mb_over_parse") > 0
    assert re.search(r"^1 MB file \(1\.0\d MB, \d+ units\)", out, flags=re.M), out


@pytest.mark.skipif(not UNIVERSAL, reason="needs universal-ctags: apt-get install universal-ctags (brew on macOS)")
def test_quick_mode_checks_coverage_against_ctags(quick):
    out = quick
    assert figure(out, "function_lines_covered") == 1.0, out
    assert figure(out, "units_named_after_non_functions") == 0, out
    assert figure(out, "units_over_several_functions") == 0, out
    (functions,) = re.findall(r"^ctags functions: (\d+);", out, flags=re.M)
    assert int(functions) > 50  # the demo corpus, zlib and libpng pieces, the kernel idioms
