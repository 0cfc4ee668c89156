"""The model's workspace tools on a 60,000-file tree: complete, correct, and every answer says what it covered.

The tree (built once per module) has small C files in 600 folders, a few known symbols at known places past the
first 20,000 files (where the old walk stopped without a word), and callers of one function in three folders.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
from pathlib import Path

import pytest

from k3lsp.tools import sandbox, symbols

pytestmark = pytest.mark.skipif(
    shutil.which("ctags") is None, reason="needs universal-ctags: apt-get install universal-ctags"
)

FOLDERS, PER_FOLDER = 600, 100
FILES = FOLDERS * PER_FOLDER + 2  # + the two files below
CALLERS = {"d000/f00007.c": "fn_7", "d300/f30011.c": "fn_30011", "d599/f59998.c": "fn_59998"}


def _tree(root: Path) -> None:
    for d in range(FOLDERS):
        folder = root / f"d{d:03}"
        folder.mkdir(parents=True)
        for f in range(PER_FOLDER):
            i = d * PER_FOLDER + f
            rel = f"d{d:03}/f{i:05}.c"
            call = "\ttarget_fn(x);\n" if rel in CALLERS else ""
            (root / rel).write_text(f"int fn_{i}(int x)\n{{\n{call}\treturn x + {i};\n}}\n")
    (root / "d598" / "target.h").write_text("#define TARGET_MAX 64\nstruct target_struct {\n\tint len;\n};\n")
    (root / "d599" / "target.c").write_text(
        '#include "../d598/target.h"\n\nint target_fn(int x)\n{\n\treturn x < TARGET_MAX;\n}\n'
    )


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """The tree, with its symbol index built (the first build is awaited, as the auditor can)."""
    root = tmp_path_factory.mktemp("kernel")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3LSP_CACHE_DIR", str(root.parent / f"{root.name}-cache"))
        _tree(root)
        status = asyncio.run(symbols.index_for(root).ready())
        assert status.complete and status.files == FILES, status
        yield root


def test_grep_searches_every_file_and_says_so(big):
    ok, text = sandbox.run_tool(big, "grep", {"pattern": r"target_fn\("})
    lines = text.split("\n")
    assert ok and re.fullmatch(
        rf"4 matching lines for 'target_fn\\\\\(' \(regex\) with ripgrep [\d.]+: searched {FILES:,} files in [\d.]+ s",
        lines[0],
    ), lines[0]
    assert lines[1:] == [
        "d000/f00007.c:3: target_fn(x);",
        "d300/f30011.c:3: target_fn(x);",
        "d599/f59998.c:3: target_fn(x);",
        "d599/target.c:3: int target_fn(int x)",
    ]
    ok, text = sandbox.run_tool(big, "grep", {"pattern": "target_fn", "path": "d300"})
    assert ok and text.startswith("1 matching line for 'target_fn' (regex) under d300 with ripgrep")
    assert f"searched {PER_FOLDER} files" in text


def test_find_definition_answers_from_the_index_and_names_it(big):
    for symbol, place in {
        "target_fn": "d599/target.c:3-6 (function)",
        "target_struct": "d598/target.h:2-4 (struct)",
        "TARGET_MAX": "d598/target.h:1-1 (macro)",
        "fn_59999": "d599/f59999.c:1-4 (function)",
    }.items():
        ok, text = sandbox.run_tool(big, "find_definition", {"symbol": symbol})
        lines = text.split("\n")
        assert ok and lines[0].startswith(f"1 definition of {symbol}, from the symbol index of {FILES:,} files ("), text
        assert lines[1] == place
    ok, text = sandbox.run_tool(big, "find_definition", {"symbol": "target_fn"})
    assert text.split("\n")[2:6] == [
        "     3  int target_fn(int x)",
        "     4  {",
        "     5  \treturn x < TARGET_MAX;",
        "     6  }",
    ]


def test_path_narrows_the_lookups(big):
    ok, text = sandbox.run_tool(big, "find_definition", {"symbol": "target_fn", "path": "d599"})
    assert ok and text.startswith("1 definition of target_fn under d599, from the symbol index")
    ok, text = sandbox.run_tool(big, "find_definition", {"symbol": "target_fn", "path": "d000"})
    assert ok and re.fullmatch(
        rf"no definition of target_fn under d000 in the symbol index of {FILES:,} files \(.*\), updated \d+ s ago", text
    ), text
    ok, text = sandbox.run_tool(big, "find_references", {"symbol": "target_fn", "path": "d300/f30011.c"})
    assert ok and text.split("\n")[1:] == ["d300/f30011.c:3 in fn_30011: target_fn(x);"]
    for bad, why in [
        ("../x", "'..' is not allowed"),
        ("/etc", "absolute paths"),
        (".git", "hidden"),
        ("d9", "no such"),
    ]:
        for tool in ("find_definition", "find_references"):
            ok, text = sandbox.run_tool(big, tool, {"symbol": "target_fn", "path": bad})
            assert not ok and why in text, (tool, bad, text)


def test_find_references_names_every_caller(big):
    ok, text = sandbox.run_tool(big, "find_references", {"symbol": "target_fn"})
    lines = text.split("\n")
    assert ok and lines[0].startswith("3 references to target_fn in 3 files and 3 functions (the occurrence index: ")
    assert "read the 4 files it names in" in lines[0] and f"the symbol index of {FILES:,} files" in lines[0], text
    assert lines[1:] == [f"{path}:3 in {caller}: target_fn(x);" for path, caller in CALLERS.items()]


def test_a_deadline_hit_says_so(big, monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "SEARCH_SECONDS", 0.001)
    ok, text = sandbox.run_tool(big, "grep", {"pattern": "return"})
    assert ok and "stopped at the 0.001 s deadline before the search was complete, so more may match: narrow" in text
    assert "0 matching" not in text or "0+ matching" in text  # never a bare count after an incomplete search
    ok, text = sandbox.run_tool(big, "find_references", {"symbol": "return"})  # in every file: read until the deadline
    assert ok and "+ reference" in text.split("\n")[0] and "and stopped at the 0.001 s deadline: " in text, text
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "fresh"))  # a first build, not done within the deadline
    ok, text = sandbox.run_tool(big, "find_definition", {"symbol": "target_fn"})
    assert ok and text.startswith("no definition of target_fn in the symbol index, still being built: "), text
    assert text.endswith("files indexed so far: ask again shortly, or grep for it")
    assert symbols.index_for(big).wait(120)  # let it end before the tree goes


def test_the_index_is_updated_incrementally(big, caplog):
    index = symbols.index_for(big)
    changed = big / "d123" / "f12345.c"
    before = changed.read_text()
    try:
        changed.write_text(before + "\nint added_fn(void)\n{\n\treturn 1;\n}\n")
        (big / "d000" / "f00000.c").unlink()
        with caplog.at_level(logging.INFO, logger="k3lsp.tools.symbols"):
            index.refresh(force=True)
            assert index.wait(120)
        assert f"{FILES - 1} files, 1 re-indexed, 1 gone" in caplog.text
        ok, text = sandbox.run_tool(big, "find_definition", {"symbol": "added_fn"})
        assert ok and text.split("\n")[1] == "d123/f12345.c:6-9 (function)"
        ok, text = sandbox.run_tool(big, "find_definition", {"symbol": "fn_0"})
        assert ok and text.startswith("no definition of fn_0 in the symbol index of")
    finally:
        changed.write_text(before)
        (big / "d000" / "f00000.c").write_text("int fn_0(int x)\n{\n\treturn x + 0;\n}\n")
        index.refresh(force=True)
        assert index.wait(120)


def test_the_index_is_private_and_beside_the_cache(big):
    index = symbols.index_for(big)
    assert index.path.parent == Path(os.environ["K3LSP_CACHE_DIR"]) / "index"
    assert index.path.stat().st_mode & 0o777 == 0o600 and index.path.parent.stat().st_mode & 0o777 == 0o700
    shown = f"index/{index.path.name}"  # the index tells which code is here: never shown, even to a workspace there
    ok, text = sandbox.run_tool(index.path.parent.parent, "read_lines", {"path": shown, "start": 1, "end": 1})
    assert not ok and "secrets are not available" in text
