"""Each witness on a small C file with a known bug: the real tool runs (skipped with its install hint when it is
not installed here; CI installs cppcheck, so that one always runs there), and its alert names the bug's line."""

from __future__ import annotations

import os

import pytest

from k3lsp.wire.cache import ResultCache
from k3lsp.witnesses import confine
from k3lsp.witnesses.adapters import ADAPTERS
from k3lsp.witnesses.analyze import analyze, find

DOUBLE_FREE = """#include <stdlib.h>
int f(void)
{
    char *p = malloc(16);
    if (!p)
        return -1;
    free(p);
    free(p);
    return 0;
}
"""
# (tool, source, line, rule, CWE) the tool must report
KNOWN = {
    "cppcheck": (DOUBLE_FREE, 8, "doubleFree", 415),
    "clang": (DOUBLE_FREE, 8, "unix.Malloc", 415),
    "gcc": (DOUBLE_FREE, 8, "analyzer-double-free", 415),
    "coccinelle": (DOUBLE_FREE, 8, "coccinelle.double-free", 415),
    "sparse": ("int g(int n)\n{\n\tchar b[4];\n\tb[n] = 0;\n\treturn b[9];\n}\n", 5, "sparse.past-end", 119),
}


def confinable() -> None:
    """Skip where this kernel cannot confine an analyzer (no Landlock), so no witness runs; CI must have it."""
    if confine.abi() < 1:
        if os.environ.get("CI") == "true":
            pytest.fail("the witnesses must run in CI: its kernel needs Landlock (Linux 5.13+)")
        pytest.skip("this kernel has no Landlock, so the witnesses do not run here (docs/witnesses.md)")


def needs(tool: str, confined: bool = True) -> None:
    """Skip unless ``tool`` is installed (in CI cppcheck must be) and, with ``confined``, can run as a witness."""
    if find(tool) is None:
        if tool == "cppcheck" and os.environ.get("CI") == "true":
            pytest.fail("cppcheck must run in CI (.ci/run installs it)")
        pytest.skip(f"{tool} is not installed: {ADAPTERS[tool].hint}")
    if confined:
        confinable()


@pytest.mark.parametrize("tool", sorted(KNOWN))
def test_each_witness_reports_its_known_alert(tool, tmp_path):
    needs(tool)
    source, line, rule, cwe = KNOWN[tool]
    path = tmp_path / "bug.c"
    path.write_text(source)
    report = analyze(path, source, tmp_path, [tool])
    (ran,) = report.runs
    assert ran.problem is None and not ran.cached
    hits = [a for a in ran.alerts if a.line == line and a.rule == rule]
    assert hits, ran.alerts
    assert hits[0].tool == tool and hits[0].cwe == cwe and hits[0].message
    assert all("free(p);" not in a.message for a in ran.alerts)  # the tool's words, never the source line


def test_results_are_cached_by_content(tmp_path):
    needs("cppcheck")
    path = tmp_path / "bug.c"
    path.write_text(DOUBLE_FREE)
    cache = ResultCache(tmp_path / "cache.sqlite3")
    first = analyze(path, DOUBLE_FREE, tmp_path, ["cppcheck"], cache)
    again = analyze(path, DOUBLE_FREE, tmp_path, ["cppcheck"], cache)
    edited = analyze(path, DOUBLE_FREE.replace("free(p);\n    return", "return"), tmp_path, ["cppcheck"], cache)
    assert again.runs[0].cached and again.alerts == first.alerts and first.alerts
    assert not edited.runs[0].cached and not [a for a in edited.alerts if a.rule == "doubleFree"]


def test_a_missing_or_unknown_witness_is_reported_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(tmp_path))
    report = analyze(tmp_path / "a.c", "int x;\n", tmp_path, ["sparse", "nosuch"])
    assert [(r.tool, r.alerts) for r in report.runs] == [("sparse", ()), ("nosuch", ())]
    assert report.runs[0].problem == f"not found: {ADAPTERS['sparse'].hint}"
    assert "unknown witness" in report.runs[1].problem


def test_an_analyzer_past_its_time_bound_is_stopped(tmp_path, monkeypatch):
    confinable()
    slow = tmp_path / "bin" / "cppcheck"
    slow.parent.mkdir()
    slow.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'Cppcheck 9.9'; exit 0; }\nexec /bin/sleep 60\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", str(slow.parent))
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(slow.parent))
    from k3lsp.witnesses.child import Limits

    report = analyze(tmp_path / "a.c", "int x;\n", tmp_path, ["cppcheck"], limits=Limits(seconds=1))
    assert report.runs[0].problem == "timed out after 1 s" and report.alerts == []


def test_only_alerts_in_the_analyzed_file_are_kept(tmp_path):
    needs("cppcheck")
    (tmp_path / "inc.h").write_text("static inline int h(void) { int a[2]; return a[5]; }\n")
    source = '#include "inc.h"\nint f(void) { return h(); }\n'
    report = analyze(tmp_path / "main.c", source, tmp_path, ["cppcheck"])
    assert all(a.line <= 2 for a in report.alerts)
    assert not [a for a in report.alerts if a.rule == "arrayIndexOutOfBounds" and a.line == 1], report.alerts


def test_sparse_reads_the_headers_beside_the_file(tmp_path):
    needs("sparse")
    (tmp_path / "local.h").write_text("#define N 4\n")
    source = '#include "local.h"\nstatic int g(int n)\n{\n\tchar b[N];\n\tb[n] = 0;\n\treturn b[9];\n}\n'
    report = analyze(tmp_path / "a.c", source, tmp_path, ["sparse"])
    assert [(a.line, a.rule) for a in report.alerts] == [(6, "sparse.past-end")], report.alerts
