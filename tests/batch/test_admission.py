"""What `k3lsp audit` says about the files it takes and skips, before any work: a directory with no C file, a
binary `.c`, a file with no function, and a run far larger than a user would expect. Real processes; no daemon is
needed (nothing here is audited, or the endpoint is one where nobody listens)."""

from __future__ import annotations

import json

from tests.support.batch import k3lsp
from tests.support.daemon import nowhere

FUNCTION = "int f(int a)\n{\n\treturn a;\n}\n"


def audit(tmp_path, *args: str):
    return k3lsp("audit", *args, "--endpoint", nowhere(tmp_path), cache=tmp_path / "c", cwd=tmp_path)


def test_a_directory_with_no_c_file_is_an_error_that_says_what_the_walk_admits(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# nothing to audit\n")
    done = audit(tmp_path, "docs")
    assert done.returncode == 2, done.stderr
    assert "k3lsp audit: error: docs: no file to audit in it (none matches **/*.c, **/*.h" in done.stderr
    assert "within 1,000,000 bytes" in done.stderr


def test_an_empty_directory_beside_c_files_is_a_warning_and_the_rest_is_audited(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.c").write_text("")  # no function: nothing to send, nothing to fail
    done = audit(tmp_path, "empty", "a.c", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert any(w.startswith("empty: no file to audit in it") for w in body["warnings"]), body
    assert "no function to audit in the 1 file" in done.stderr


def test_a_binary_c_file_is_skipped_with_the_reason_and_nothing_left_is_an_error(tmp_path):
    (tmp_path / "blob.c").write_bytes(FUNCTION.encode() + b"\x00\x01\x02\xff")
    done = audit(tmp_path, "blob.c", "--json")
    assert done.returncode == 2, done.stderr
    assert "k3lsp audit: warning: blob.c: binary (a NUL byte on line 5): not audited" in done.stderr
    assert "k3lsp audit: error: nothing to audit: every file given was skipped" in done.stderr
    assert json.loads(done.stdout)["stats"]["files"] == 0


def test_a_binary_file_in_a_directory_is_skipped_and_the_others_are_audited(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "blob.c").write_bytes(b"\x7fELF\x00\x00")
    (src / "decl.h").write_text("int f(int a);\n")
    done = audit(tmp_path, "src", "--json")
    assert done.returncode == 0, done.stderr
    assert "src/blob.c: binary (a NUL byte on line 1): not audited" in done.stderr
    assert json.loads(done.stdout)["stats"]["files"] == 1


def test_a_named_file_over_max_file_bytes_is_announced_with_its_units_and_cost_before_the_run(tmp_path):
    """Named files skip maxFileBytes (the user asked for them), but a generated one is tens of thousands of units:
    the warning comes first, before the daemon is even tried."""
    body = "".join(f"int gen_{i}(int a)\n{{\n\treturn a * {i} + {i * 7} - {i * 13} + {i * 17} - 1;\n}}\n"
                   for i in range(20_000))  # fmt: skip
    (tmp_path / "gen.c").write_text(body)
    assert len(body) > 1_000_000
    done = audit(tmp_path, "gen.c")
    assert done.returncode == 2, done.stderr  # nobody listens: the units are not audited
    lines = done.stderr.splitlines()
    first = lines[0]
    assert first.startswith(f"k3lsp audit: warning: gen.c: {len(body):,} bytes, over maxFileBytes (1,000,000)"), lines
    assert "20,000 units" in first and "tokens" in first
    assert any("not reachable" in line for line in lines[1:]), lines


def test_files_a_directory_walk_skips_as_too_large_are_counted_with_the_largest_named(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "small.h").write_text("int f(int a);\n")
    (src / "gen.c").write_text("/*" + "x" * 1_200_000 + "*/\n")
    (src / "big.c").write_text("/*" + "x" * 1_100_000 + "*/\n")
    done = audit(tmp_path, "src", "--json")
    assert done.returncode == 0, done.stderr
    said = (
        "src: 2 files over maxFileBytes (1,000,000) not audited, the largest src/gen.c (1,200,005 bytes); "
        "name a file on the command line to audit it whatever its size"
    )
    assert f"k3lsp audit: warning: {said}" in done.stderr, done.stderr
    assert json.loads(done.stdout)["stats"]["files"] == 1
