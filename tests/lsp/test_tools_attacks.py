"""The new backends of the workspace tools (ripgrep, universal-ctags, the workspace's tags file) keep the
sandbox's refusals, attacked as a hostile repository and a steered model would."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from k3lsp.tools import sandbox, symbols

pytestmark = pytest.mark.skipif(
    shutil.which("ctags") is None, reason="needs universal-ctags: apt-get install universal-ctags"
)


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A workspace whose names look like options and whose links, hidden files and secrets lead out."""
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "creds.c").write_text("int stolen_out(void) { return 1; }\n")
    (outside / "linked.c").write_text("int stolen_link(void) { return 2; }\n")
    marker = tmp_path / "pwned"
    # ctags reads option lines from its file list: a file named like an option must stay a file name.
    (root / "opts.c").write_text(f"--kinds-C=-f\n--kinds-C++=-f\n-f{marker}\n")
    (root / "--options=opts.c").write_text("int dashed_fn(void)\n{\n\treturn 0;\n}\n")
    (root / "-e.c").write_text("int minus_e_fn(void) { return 0; }\n")
    (root / "--pre=sh").mkdir()
    (root / "--pre=sh" / "inner.c").write_text("int pre_fn(void) { return 0; }\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.c").write_text("int stolen_hidden(void) { return 3; }\n")
    (root / "out_dir").symlink_to(outside)
    (root / "out_file.c").symlink_to(outside / "creds.c")
    os.link(outside / "linked.c", root / "harmless.c")
    (root / "server.PEM.c").write_text("int stolen_pem(void) { return 4; }\n")  # not a secret name: a C file
    (root / "id_RSA.h").write_text("int stolen_key(void);\n")  # a secret name, in any case
    (root / "main.c").write_text("int main(void)\n{\n\treturn dashed_fn() + minus_e_fn() + pre_fn();\n}\n")
    return root, marker


def built(root):
    status = asyncio.run(symbols.index_for(root).ready())
    assert status.complete, status
    return status


@pytest.mark.parametrize("pattern", ["--files", "-e", "--pre=sh", "-f/etc/passwd", "--no-config", "-uuu"])
def test_patterns_that_look_like_options_are_patterns(hostile, pattern):
    root, _ = hostile
    (root / "flags.c").write_text(f"/* {pattern} */\n")
    ok, text = sandbox.run_tool(root, "grep", {"pattern": pattern})
    assert ok and text.split("\n")[1:] == [f"flags.c:1: /* {pattern} */"], text


def test_paths_that_look_like_options_are_paths(hostile):
    root, marker = hostile
    ok, text = sandbox.run_tool(root, "grep", {"pattern": "pre_fn", "path": "--pre=sh"})
    assert ok and text.split("\n")[1:] == ["--pre=sh/inner.c:1: int pre_fn(void) { return 0; }"]
    ok, text = sandbox.run_tool(root, "grep", {"pattern": "fn", "path": "-e.c"})
    assert ok and text.split("\n")[1:] == ["-e.c:1: int minus_e_fn(void) { return 0; }"]
    built(root)
    places = [
        ("dashed_fn", "--options=opts.c:1-4"),
        ("minus_e_fn", "-e.c:1-1"),
        ("pre_fn", "--pre=sh"),
        ("main", "main.c"),
    ]
    for symbol, place in places:
        ok, text = sandbox.run_tool(root, "find_definition", {"symbol": symbol})
        assert ok and text.split("\n")[1].startswith(place), text
    assert not marker.exists()  # no option file was read, no tags written anywhere


def test_nothing_outside_hidden_linked_or_secret_reaches_the_index_or_the_searches(hostile):
    root, _ = hostile
    status = built(root)
    for symbol in ("stolen_out", "stolen_link", "stolen_hidden", "stolen_key"):
        ok, text = sandbox.run_tool(root, "find_definition", {"symbol": symbol})
        assert ok and text.startswith(f"no definition of {symbol} in the symbol index of {status.files} files"), text
        ok, text = sandbox.run_tool(root, "find_references", {"symbol": symbol})
        assert ok and text.startswith(f"0 references to {symbol}"), text
        ok, text = sandbox.run_tool(root, "grep", {"pattern": symbol})
        assert ok and text.startswith("0 matching lines"), text
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "stolen_pem"})
    assert ok and text.split("\n")[1] == "server.PEM.c:1-1 (function)"  # a C file is no key store
    for path in ("out_dir", "out_file.c", ".hidden", "id_RSA.h", "harmless.c"):
        ok, text = sandbox.run_tool(root, "grep", {"pattern": "stolen", "path": path})
        assert "return" not in text and "stolen_" not in text.split("\n", 1)[-1], (path, text)


def test_a_hostile_tags_file_runs_nothing_and_names_nothing_outside(hostile, tmp_path):
    root, marker = hostile
    (root / "lib.c").write_text("/* lib */\nstatic int helper(int x)\n{\n\treturn x;\n}\nint other;\n")
    lines = [
        "!_TAG_FILE_FORMAT\t2\t/extended format/",
        f"evil\tlib.c\t:!touch {marker}\n",
        f'evil2\tlib.c\t:call system("touch {marker}")|;"\tf',
        'helper\tlib.c\t/^static int helper(int x)$/;"\tf',
        'other\tlib.c\t6;"\tkind:variable',
        'stolen_out\t../outside/creds.c\t/^int stolen_out/;"\tf',
        f'stolen_out\t{tmp_path}/outside/creds.c\t1;"\tf',
        'stolen_abs\t/etc/passwd\t1;"\tf',
        'stolen_hidden\t.hidden/h.c\t1;"\tf',
        'stolen_out\tout_dir/creds.c\t1;"\tf',
        'stolen_link\tharmless.c\t1;"\tf',
        'liar\tlib.c\t/^no such line$/;"\tf',
        "x" * 5000 + '\tlib.c\t1;"\tf',
        'bad name\tlib.c\t1;"\tf',
    ]
    (root / "tags").write_text("\n".join(lines) + "\n")
    status = built(root)
    assert "from the workspace's tags file" in status.indexer
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "helper"})
    assert ok and text.split("\n")[1:3] == ["lib.c:2-2 (function)", "     2  static int helper(int x)"], text
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "other"})
    assert ok and text.split("\n")[1] == "lib.c:6-6 (variable)"
    for symbol in ("evil", "evil2", "stolen_out", "stolen_abs", "stolen_hidden", "stolen_link", "liar"):
        ok, text = sandbox.run_tool(root, "find_definition", {"symbol": symbol})
        assert text.startswith(f"no definition of {symbol} "), text
    assert not marker.exists()
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "main"})
    assert ok and text.split("\n")[1] == "main.c:1-4 (function)"  # not in the tags file: indexed by ctags


def test_a_tags_file_older_than_a_source_does_not_speak_for_it(hostile):
    root, _ = hostile
    (root / "tags").write_text('moved\tmain.c\t1;"\tf\n')
    old = (root / "tags").stat().st_mtime_ns - 10**10
    os.utime(root / "tags", ns=(old, old))
    built(root)
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "moved"})
    assert text.startswith("no definition of moved ")
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "main"})
    assert ok and text.split("\n")[1] == "main.c:1-4 (function)"


def test_without_ctags_the_splitter_indexes_and_the_answer_says_so(tmp_path, monkeypatch, examples):
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))
    no_ctags = tmp_path / "bin"  # a PATH without ctags (the index is built in a child process, which reads it)
    no_ctags.mkdir()
    monkeypatch.setenv("PATH", str(no_ctags))
    root = tmp_path / "ws"
    shutil.copytree(examples, root)
    built(root)
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": "k3demo_alloc_table"})
    lines = text.split("\n")
    assert ok and "(the k3lsp splitter (universal-ctags not found))" in lines[0]
    assert lines[1] == "k3demo_syscalls.c:25-37 (function)"
    ok, text = sandbox.run_tool(root, "find_references", {"symbol": "k3demo_alloc_table"})
    assert ok and text.split("\n")[1].startswith("k3demo_syscalls.c:50 in ")
