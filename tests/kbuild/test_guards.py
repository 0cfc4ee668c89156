"""k3lsp/kbuild/guards.py: the #if guards around a line under one configuration, with unknowns where the
configuration cannot tell."""

from __future__ import annotations

import subprocess

import pytest

from k3lsp.kbuild.config import parse
from k3lsp.kbuild.guards import Guards

CONFIG = parse('CONFIG_NET=y\nCONFIG_USB=m\nCONFIG_HZ=250\nCONFIG_NAME="x"\n# CONFIG_BPF is not set\n')


def verdict(source: str, line: int, module: bool | None = None) -> str:
    """The state of ``line`` under the guards of ``source``: "built" when they all hold."""
    found = Guards(source, CONFIG, module).at(line)
    return "built" if found is None else str(found)


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        ("#ifdef CONFIG_NET", "built"),
        ("#ifdef CONFIG_USB", "not built: line 1: `#ifdef CONFIG_USB` (CONFIG_USB=m)"),  # =m defines _MODULE only
        ("#if defined(CONFIG_USB_MODULE)", "built"),
        ("#ifndef CONFIG_BPF", "built"),
        ("#if IS_ENABLED(CONFIG_USB) && IS_MODULE(CONFIG_USB)", "built"),
        ("#if IS_BUILTIN(CONFIG_USB)", "not built: line 1: `#if IS_BUILTIN(CONFIG_USB)` (CONFIG_USB=m)"),
        ("#if CONFIG_HZ >= 250 && !defined CONFIG_BPF", "built"),
        ("#if defined(CONFIG_NAME) || FOO", "built"),  # decided by one side
        (
            "#if FOO && defined(CONFIG_BPF)",
            "not built: line 1: `#if FOO && defined(CONFIG_BPF)` (CONFIG_BPF is not set; FOO: not a config symbol)",
        ),
        (
            "#if FOO || defined(CONFIG_BPF)",
            "unknown: line 1: `#if FOO || defined(CONFIG_BPF)` (CONFIG_BPF is not set; FOO: not a config symbol)",
        ),
        (
            "#if SOME_MACRO(CONFIG_NET)",
            "unknown: line 1: `#if SOME_MACRO(CONFIG_NET)` (CONFIG_NET=y; SOME_MACRO: not a config symbol)",
        ),
    ],
)
def test_a_test_of_the_configuration(test, expected):
    assert verdict(f"{test}\nint f(void) {{ return 0; }}\n#endif\n", 2) == expected


def test_else_elif_nesting_and_continuations():
    source = (
        "#ifdef CONFIG_BPF\n"  # 1
        "int a;\n"  # 2
        "#elif defined(CONFIG_NET) && \\\n"  # 3
        "      CONFIG_HZ == 250\n"  # 4
        "int b;\n"  # 5
        "# ifdef CONFIG_USB /* nested, spaced */\n"  # 6
        "int c;\n"  # 7
        "# endif\n"  # 8
        "#else\n"  # 9
        "int d;\n"  # 10
        "#endif\n"  # 11
        "int e;\n"  # 12
    )
    assert verdict(source, 2) == "not built: line 1: `#ifdef CONFIG_BPF` (CONFIG_BPF is not set)"
    assert verdict(source, 5) == "built"
    assert verdict(source, 7) == "not built: line 6: `#ifdef CONFIG_USB` (CONFIG_USB=m)"
    assert verdict(source, 10) == "not built: line 9: `#else` (the branch before it holds)"
    assert verdict(source, 12) == "built"


def test_module_include_guards_and_the_files_own_macros():
    source = (
        "#ifndef _X_H\n#define _X_H\n#define LOCAL 2\n#if LOCAL > 1\nint a;\n#endif\n#ifdef MODULE\nint m;\n#endif\n"
    )
    assert verdict(source, 5) == "built"
    assert verdict(source, 8, module=True) == "built"
    assert verdict(source, 8, module=False).startswith("not built: line 7: `#ifdef MODULE`")
    assert verdict(source, 8).startswith("unknown: line 7: `#ifdef MODULE`")
    assert verdict("#if (1\nint a;\n#endif\n", 2).startswith("unknown")  # a test it cannot parse


def test_lines_are_counted_as_the_units_are_and_cut_as_the_compiler_cuts_them():
    """A unit's line is counted at ``\\n`` alone (the splitter's count, git's). ``str.splitlines`` also cut at a form
    feed, ``\\v``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029 inside a comment, so every later line was judged
    by a line above it: two form feeds put the built ``live`` under the ``#if 0`` before it, and
    ``k3lsp audit --only-built`` skipped it (issue 38, 1's reading applied to the guards). gcc also ends a line at
    a lone ``\\r``, so the ``#if 0`` after one on line 5 is a directive, as it is here; gcc -E shows which
    functions it keeps."""
    source = (
        "/* a\f\u2028 */\n"  # 1
        "#if 0\n"  # 2
        "int dead(void) { return 0; }\n"  # 3
        "#endif\n"  # 4
        "int live(void) { return 1; }\r#if 0\n"  # 5
        "int gone(void) { return 2; }\n"  # 6
        "#endif\r\n"  # 7
        "int last(void) { return 3; }\n"  # 8
    )
    verdicts = {name: verdict(source, line) for name, line in (("dead", 3), ("live", 5), ("gone", 6), ("last", 8))}
    assert verdicts == {
        "dead": "not built: line 2: `#if 0` (a constant)",
        "live": "built",
        "gone": "not built: line 5: `#if 0` (a constant)",
        "last": "built",
    }
    kept = subprocess.run(["gcc", "-E", "-P", "-x", "c", "-"], input=source.encode(), capture_output=True, check=True)
    assert {name for name in verdicts if f"int {name}(".encode() in kept.stdout} == {"live", "last"}
