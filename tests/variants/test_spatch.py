"""The rule run by the real spatch in the witnesses' sandbox (k3lsp/variants/spatch.py): the planted variants
found, a rule spatch cannot parse said in spatch's words, the bounds (files, time, matches) said when they cut the
search short, and nothing outside the workspace read or written even by a rule that got past the checks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from k3lsp.variants.rule import RuleRefused, check
from k3lsp.variants.spatch import Bounds, marked_lines, parse_error, search
from k3lsp.witnesses.analyze import find
from tests.variants.tree import DOUBLE_KFREE, UNCHECKED_KMALLOC, plant
from tests.witnesses.test_adapters import needs


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    needs("coccinelle")
    return plant(tmp_path.resolve() / "ws")


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.c"))


def _found(scan) -> set[tuple[str, int]]:
    return {(m.path.name, m.line) for m in scan.matches}


def test_spatch_finds_the_planted_unchecked_allocations_and_not_the_checked_one(tree):
    scan = search(UNCHECKED_KMALLOC, _files(tree), tree)
    assert _found(scan) == {("a.c", 6), ("a.c", 7), ("a.c", 15), ("a.c", 16), ("b.c", 6), ("b.c", 7)}
    assert scan.stopped is None and scan.searched == scan.total == 3 and not scan.errors


def test_spatch_finds_the_planted_double_frees_and_not_the_free_before_a_new_allocation(tree):
    scan = search(DOUBLE_KFREE, _files(tree), tree)
    assert _found(scan) == {("b.c", 14), ("c.c", 8)}


def test_a_rule_spatch_cannot_parse_is_said_in_spatchs_words_and_a_good_one_passes(tree):
    assert parse_error(UNCHECKED_KMALLOC, tree) is None
    said = parse_error("@@\nexpression E\n@@\n*kfree(E);\n", tree)
    assert said is not None and "parse error" in said and "init_defs_builtins" not in said


def test_the_match_bound_stops_the_search_and_says_so(tree):
    scan = search(UNCHECKED_KMALLOC, _files(tree), tree, Bounds(matches=2, chunk=1))
    assert len(scan.matches) == 2 and scan.searched == 1
    assert scan.stopped == "the match bound: 2 matches, 1 of 3 files"


def test_the_file_bound_searches_the_first_files_and_says_how_many_were_left(tree):
    scan = search(UNCHECKED_KMALLOC, _files(tree), tree, Bounds(files=1))
    assert {m.path.name for m in scan.matches} == {"a.c"} and scan.searched == 1
    assert scan.stopped == "the file bound: 1 of 3 files searched"


def test_the_time_bound_kills_spatch_and_says_how_far_it_got(tree):
    scan = search(UNCHECKED_KMALLOC, _files(tree), tree, Bounds(seconds=0.01, chunk=1))
    assert scan.matches == [] and scan.searched == 0
    assert scan.stopped == "the time bound: 0.01 s, 0 of 3 files"


def test_a_diff_line_that_looks_like_a_header_is_read_as_the_line_it_is():
    first = "--- /ws/a.c\n+++ /tmp/out.c\n@@ -3,3 +3,1 @@\n--- x;\n-+++ y;\n z;\n"  # removed: "-- x;", "++ y;"
    second = "--- /ws/b.c\n+++ /tmp/o.c\n@@ -9 +8,0 @@\n-q;\n"
    assert marked_lines(first + second) == {Path("/ws/a.c"): [3, 4], Path("/ws/b.c"): [9]}


def _unconfined(rule: str, source: Path, folder: Path) -> subprocess.CompletedProcess:
    """The control: spatch run on ``rule`` as the search runs it, but unconfined, in ``folder``."""
    (folder / "control.cocci").write_text(rule)
    argv = [find("coccinelle").executable, "--sp-file", "control.cocci", "--no-includes", "--very-quiet", str(source)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=folder)


def test_a_workspace_link_to_a_file_outside_is_not_read(tree, tmp_path):
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "secret.c").write_text((tree / "drivers/usb/b.c").read_text())
    (tree / "link.c").symlink_to(outside / "secret.c")
    control = _unconfined(DOUBLE_KFREE, tree / "link.c", tmp_path)
    assert "kfree" in control.stdout  # unconfined, spatch reads through the link
    scan = search(DOUBLE_KFREE, [tree / "link.c"], tree)
    assert scan.matches == [] and scan.searched == 1


def test_a_script_that_got_past_the_checks_still_writes_nothing_outside(tree, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = f'@r@\nexpression E;\n@@\n*kfree(E);\n\n@script:python@\ne << r.E;\n@@\nopen("{marks}/ran", "w").close()\n'
    _unconfined(script, tree / "fs/c.c", tmp_path)
    assert (marks / "ran").exists()  # the control: such a rule runs Python when spatch runs it
    (marks / "ran").unlink()
    search(script, [tree / "fs/c.c"], tree)  # confined: only its private directory is writable
    assert not (marks / "ran").exists()


def test_an_include_that_got_past_the_checks_still_reads_no_rule_outside(tree, tmp_path):
    """The checks refuse any ``#``; behind them, the sandbox: a rule that includes one outside the workspace
    (whose kmalloc line would show it was read) finds only what its own text marks."""
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "canary.cocci").write_text("@canary@\n@@\n* kmalloc(...)\n")
    including = f'#include "{outside / "canary.cocci"}"\n{DOUBLE_KFREE}'
    control = _unconfined(including, tree / "fs/c.c", tmp_path)
    assert "-\tname = kmalloc(8, GFP_KERNEL);" in control.stdout  # unconfined, spatch reads the included rule
    scan = search(including, [tree / "fs/c.c"], tree)
    assert ("c.c", 14) not in _found(scan) and scan.errors  # confined, it cannot open it and says so


def test_the_workspaces_cocciconfig_is_never_read(tree, tmp_path):
    """spatch reads ``.cocciconfig`` from its working directory and HOME (options such as ``--python PROG``): run in
    the workspace it obeys one there; the search runs it in a private directory, given each file by its path."""
    config = "[spatch]\noptions = --no-such-option-k3lsp\n"
    for folder in (tree, tree / "fs"):
        (folder / ".cocciconfig").write_text(config)
    (tmp_path / "rule.cocci").write_text(DOUBLE_KFREE)
    spatch = find("coccinelle").executable
    control = subprocess.run([spatch, "--sp-file", str(tmp_path / "rule.cocci"), "--very-quiet", "fs/c.c"],
                             cwd=tree, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert control.returncode != 0 and "kfree" not in control.stdout  # the option was read: spatch refused to run
    scan = search(DOUBLE_KFREE, [tree / "fs/c.c"], tree)
    assert _found(scan) == {("c.c", 8)} and not scan.errors


@pytest.mark.parametrize("header", ["@script\n:\npython@", "@script/**/:/**/python@"])
def test_a_script_header_split_over_lines_or_comments_runs_python_and_is_refused(tree, tmp_path, header):
    rule = f'@r@\nexpression E;\n@@\n* kfree(E);\n\n{header}\ne << r.E;\n@@\nprint("K3LSP-" + "RAN")\n'
    control = _unconfined(rule, tree / "fs/c.c", tmp_path)
    assert "K3LSP-RAN" in control.stdout + control.stderr  # spatch reads it as a script rule
    with pytest.raises(RuleRefused, match="a script"):
        check(rule)


def test_a_file_spatch_cannot_finish_costs_only_itself(tree):
    """spatch's --timeout covers the files of one run together: one slow file lost the matches of every file
    searched with it (13 of 21 runs over XNU). Each file is a group of its own (--file-groups)."""
    ifs = "".join(f"\tif (a > {i})\n\t\ta += {i};\n\telse\n\t\ta -= {i};\n" for i in range(400))
    (tree / "fs/slow.c").write_text(f"void slow(char *p, int a)\n{{\n\tkfree(p);\n{ifs}\tkfree(p);\n}}\n")
    scan = search(DOUBLE_KFREE, [tree / "fs/slow.c", tree / "fs/c.c"], tree, Bounds(per_file=1))
    assert _found(scan) == {("c.c", 8)}  # the paths through slow() are too many for 1 s
    assert scan.searched == 2 and scan.errors == [f"{tree / 'fs/slow.c'}: spatch gave up after 1 s"]
