"""Identifier searches answered from the occurrence index (issue 44): the same lines as ripgrep's whole-word
search, exactly what was left out when the answer is full, kept up to date by a refresh, confined like every
other read, and the macros of a generated register header found although the index does not keep them."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from k3lsp.tools import build, sandbox, search, symbols

pytestmark = pytest.mark.skipif(
    shutil.which("ctags") is None, reason="needs universal-ctags: apt-get install universal-ctags"
)

SPREAD = 300  # files holding `shared_word`, more than one answer shows


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))
    root = tmp_path / "ws"
    for i in range(SPREAD):
        folder = root / ("drivers" if i < 200 else "fs") / f"d{i // 50}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:03}.c").write_text(f"int f{i}(void)\n{{\n\treturn shared_word + {i};\n}}\n")
    (root / "lib").mkdir()
    (root / "lib" / "target.c").write_text("int target_fn(int x)\n{\n\treturn x;\n}\n")
    (root / "lib" / "caller.c").write_text(
        "int caller(void)\n{\n\treturn target_fn(1) + target_fn(2);\n}\n/* target_fnx, xtarget_fn */\n"
    )
    (root / "README").write_text("Call target_fn, not target_fns.\n")
    macros = "".join(f"#define mmREG_{i} 0x{i:x}\n" for i in range(build.DENSE_MACROS + 1))
    (root / "lib" / "regs.h").write_text(macros + "#define mmLONG \\\n\t0x1\n")
    built(root)
    return root


def built(root):
    index = symbols.index_for(root)
    index.refresh(force=True)
    status = asyncio.run(index.ready())
    assert status.complete and index.words_ready(), status
    return status


def test_whole_word_searches_from_the_index_match_ripgrep(ws):
    for word in ("target_fn", "shared_word", "mmREG_7"):
        for sources in (True, False):
            rg = search.search(ws, word, None, seconds=30, kill_after=30, word=True, sources=sources)
            index = symbols.index_for(ws)
            found = search.indexed(ws, index.files_with(word, sources=sources), word, 30, 10**6)
            assert found.engine == "the occurrence index" and not found.unread
            assert [(h.path, h.line, h.text) for h in found.hits] == [(h.path, h.line, h.text) for h in rg.hits]
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": r"\btarget_fn\b"})
    lines = text.split("\n")
    assert ok and lines[0].startswith(
        r"3 matching lines for '\\btarget_fn\\b' (whole word) with the occurrence index: read the 3 files it names in "
    ), lines[0]
    assert lines[1:] == [
        "README:1: Call target_fn, not target_fns.",
        "lib/caller.c:3: return target_fn(1) + target_fn(2);",
        "lib/target.c:1: int target_fn(int x)",
    ]
    ok, text = sandbox.run_tool(ws, "find_references", {"symbol": "target_fn"})
    assert ok and text.split("\n")[1:] == ["lib/caller.c:3 in caller: return target_fn(1) + target_fn(2);"], text
    assert text.startswith("1 reference to target_fn in 1 file and 1 function (the occurrence index: read the 2 files")


def test_a_full_answer_says_exactly_which_files_it_did_not_read(ws):
    ok, text = sandbox.run_tool(ws, "find_references", {"symbol": "shared_word"})
    head = text.split("\n")[0]
    read = sandbox.INDEX_LINES  # one line a file
    assert ok and head.startswith(f"{read}+ references to shared_word"), head
    left = SPREAD - read
    assert f"read {read} of the {SPREAD} files it names, in path order, and stopped at enough lines to show: " in head
    assert f"{left} files not read (fs/ {left}), from fs/d{read // 50}/f{read:03}.c on: narrow with path" in head
    ok, text = sandbox.run_tool(ws, "find_references", {"symbol": "shared_word", "path": "fs/d5"})
    assert ok and text.startswith("50 references to shared_word under fs/d5 in 50 files and 50 functions"), text


def test_a_refresh_follows_changed_added_and_deleted_files(ws):
    (ws / "lib" / "caller.c").write_text("int caller(void)\n{\n\treturn 0;\n}\n")
    (ws / "new.c").write_text("int newer(void)\n{\n\treturn target_fn(3);\n}\n")
    (ws / "lib" / "target.c").unlink()
    built(ws)
    ok, text = sandbox.run_tool(ws, "find_references", {"symbol": "target_fn"})
    assert ok and text.split("\n")[1:] == ["new.c:3 in newer: return target_fn(3);"], text
    assert "read the 1 file it names" in text  # caller.c and target.c no longer hold it


def test_macros_of_a_dense_header_are_found_by_reading_it(ws):
    ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": "mmREG_7"})
    assert ok and text.split("\n")[1:3] == ["lib/regs.h:8-8 (macro)", "     8  #define mmREG_7 0x7"], text
    ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": "mmLONG"})
    assert ok and text.split("\n")[1] == f"lib/regs.h:{build.DENSE_MACROS + 2}-{build.DENSE_MACROS + 3} (macro)"
    index = symbols.index_for(ws)
    assert index._query("SELECT count(*) FROM tags WHERE kind=?", (build.KIND_CODES["macro"],)) == [(0,)]


def test_a_file_swapped_for_a_link_out_after_indexing_is_not_read(ws, tmp_path):
    outside = tmp_path / "outside.c"
    outside.write_text("int stolen(void) { return target_fn(0); }\n")
    (ws / "lib" / "caller.c").unlink()
    (ws / "lib" / "caller.c").symlink_to(outside)  # the index still names caller.c: no refresh since
    for tool, args in (("find_references", {"symbol": "target_fn"}), ("grep", {"pattern": r"\btarget_fn\b"})):
        ok, text = sandbox.run_tool(ws, tool, args)
        assert ok and "stolen" not in text and "caller.c" not in text.split("\n", 1)[-1], text
