"""The symbol index kept fresh by the file system's change notices (issue 44): a change is indexed from its
folder alone, within a second, with no whole listing; deleted and moved folders follow; a burst too wide to name
lists the whole tree; a noticed path is vetted as a whole listing vets it (links out, hidden, ignored, hard-linked
and swapped folders add nothing); and without a watch the index refreshes the whole tree as before."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time

import pytest
from watchdog.events import DirCreatedEvent, DirMovedEvent, FileClosedEvent, FileModifiedEvent, FileMovedEvent

from k3lsp.tools import notices, sandbox, symbols

pytestmark = pytest.mark.skipif(
    shutil.which("ctags") is None, reason="needs universal-ctags: apt-get install universal-ctags"
)

SECONDS = 20.0  # a notice reaches the index in about a second; this bounds a wait that never ends


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))
    root = tmp_path / "ws"
    for folder, name in (("lib", "alpha"), ("drv/net", "beta"), ("drv/usb", "gamma")):
        (root / folder).mkdir(parents=True)
        (root / folder / f"{name}.c").write_text(f"int {name}(void)\n{{\n\treturn 1;\n}}\n")
    return root


def watched(root) -> symbols.SymbolIndex:
    """The index of ``root``, built whole once its watch is whole: from then on the notices drive it."""
    index = symbols.index_for(root)
    index.refresh()
    assert until(lambda: index._notices.since is not None), index._notices.why
    index.refresh(force=True)
    assert index.wait(SECONDS) and index.watched(), index.status()
    return index


def until(held, seconds: float = SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while not held():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def defined(index: symbols.SymbolIndex, name: str) -> list[str]:
    return [tag.path for tag in index.definitions(name)]


def test_a_build_awaited_or_warmed_starts_no_watch_until_a_lookup(ws):
    index = symbols.index_for(ws)
    asyncio.run(index.ready())  # what `k3lsp review` does; an audit warms the index
    symbols.warm(ws)
    assert index._notices is None and defined(index, "alpha") == ["lib/alpha.c"]
    ok, _ = sandbox.run_tool(ws, "find_definition", {"symbol": "alpha"})  # the model looks something up
    assert ok and index._notices is not None


def test_a_change_is_indexed_from_its_folder_alone(ws):
    index = watched(ws)
    (ws / "lib" / "delta.c").write_text("int delta(void)\n{\n\treturn alpha();\n}\n")
    assert until(lambda: defined(index, "delta") == ["lib/delta.c"] and not index.status().building)
    assert index.status().refreshed == "1 folder, 2 files"  # lib's own files: not the tree
    assert index.files_with("alpha") == ["lib/alpha.c", "lib/delta.c"]  # its words too
    (ws / "lib" / "alpha.c").write_text("int alpha_renamed(void)\n{\n\treturn 0;\n}\n")
    assert until(lambda: defined(index, "alpha_renamed") == ["lib/alpha.c"] and not index.status().building)
    assert defined(index, "alpha") == [] and index.files_with("alpha") == ["lib/delta.c"]
    index.refresh()  # a lookup with nothing noticed starts nothing
    assert not index.status().building and index.status().refreshed == "1 folder, 2 files"


def test_deleted_and_moved_folders_follow(ws):
    index = watched(ws)
    shutil.rmtree(ws / "drv" / "net")
    os.rename(ws / "drv" / "usb", ws / "lib" / "usb")
    assert until(
        lambda: (
            defined(index, "beta") == []
            and defined(index, "gamma") == ["lib/usb/gamma.c"]
            and not index.status().building
        )
    )
    assert index.files_with("gamma") == ["lib/usb/gamma.c"]
    assert defined(index, "alpha") == ["lib/alpha.c"]  # the folders not named are kept


def test_a_burst_too_wide_to_name_lists_the_whole_tree(ws):
    index = watched(ws)
    wide = notices.MAX_FOLDERS + 1
    for n in range(wide):
        (ws / "gen" / f"d{n}").mkdir(parents=True)
        (ws / "gen" / f"d{n}" / "g.c").write_text(f"int gen_{n}(void)\n{{\n\treturn {n};\n}}\n")
    assert until(lambda: defined(index, f"gen_{wide - 1}") != [] and not index.status().building)
    assert index.status().refreshed == "the whole tree"
    assert all(defined(index, f"gen_{n}") == [f"gen/d{n}/g.c"] for n in range(wide))


def test_noticed_paths_are_vetted_as_a_whole_listing_vets_them(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("file", "hard", "dir"):
        (outside / f"{name}.c").write_text(f"int stolen_{name}(void)\n{{\n\treturn 0;\n}}\n")
    (ws / ".ignore").write_text("gen/\n")  # ripgrep's own ignore file (no git repository needed), in force
    index = watched(ws)
    (ws / "lib" / "link.c").symlink_to(outside / "file.c")  # a file linked out
    (ws / "linked").symlink_to(outside)  # a folder linked out
    os.link(outside / "hard.c", ws / "lib" / "hard.c")  # another name of a file outside
    (ws / ".hidden").mkdir()
    for folder in (ws / ".hidden", ws / "gen", ws / "lib" / "gen" / "deep"):  # hidden; ignored, from the root down
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "g.c").write_text("int stolen_ignored(void)\n{\n\treturn 0;\n}\n")
    shutil.rmtree(ws / "drv" / "usb")  # a folder swapped for a link out once the index named its files
    (ws / "drv" / "usb").symlink_to(outside)
    (ws / "lib" / "sentinel.c").write_text("int sentinel(void)\n{\n\treturn 0;\n}\n")
    assert until(
        lambda: (
            defined(index, "sentinel") == ["lib/sentinel.c"]
            and defined(index, "gamma") == []
            and not index.status().building
        )
    )
    for name in ("stolen_file", "stolen_hard", "stolen_dir", "stolen_ignored"):
        assert defined(index, name) == [] and index.files_with(name) == [], name
    paths = {row[0] for row in index._query("SELECT path FROM files")}
    assert paths == {"lib/alpha.c", "lib/sentinel.c", "drv/net/beta.c"}, paths
    (ws / ".ignore").write_text("lib/\n")  # the rules changed: the whole tree is listed again under them
    assert until(lambda: defined(index, "sentinel") == [] and not index.status().building)
    assert index.status().refreshed == "the whole tree"
    assert defined(index, "stolen_ignored") == ["gen/g.c"]  # no longer ignored, and in the tree


def test_an_index_kept_inside_the_workspace_does_not_refresh_itself_for_ever(ws, monkeypatch):
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(ws / "lib" / "k3cache"))  # each refresh writes into a watched folder
    index = watched(ws)
    (ws / "lib" / "delta.c").write_text("int delta(void)\n{\n\treturn 0;\n}\n")
    assert until(lambda: defined(index, "delta") == ["lib/delta.c"] and not index.status().building)
    updated = index.status().updated
    time.sleep(4 * notices.QUIET)  # a refresh's own writes, noticed, would have started another by now
    assert index.status().updated == updated and not index.status().building


def test_without_a_watch_the_whole_tree_is_refreshed_as_before(ws, monkeypatch):
    said = json.dumps({"unwatched": "inotify's watch limit"})
    monkeypatch.setattr(notices, "command", lambda root, ignored: [sys.executable, "-c", f"print({said!r})"])
    index = symbols.index_for(ws)
    index.refresh(force=True)
    assert index.wait(SECONDS) and until(lambda: index._notices.why == "inotify's watch limit")
    assert not index.watched() and defined(index, "alpha") == ["lib/alpha.c"]
    (ws / "lib" / "delta.c").write_text("int delta(void)\n{\n\treturn 0;\n}\n")
    index.refresh()  # under REFRESH_SECONDS since the last: nothing starts
    assert not index.status().building and defined(index, "delta") == []
    index.refresh(force=True)
    assert index.wait(SECONDS) and defined(index, "delta") == ["lib/delta.c"]
    assert index.status().refreshed == "the whole tree"


def test_a_burst_names_the_folders_to_list_again(tmp_path):
    root = str(tmp_path)
    burst = notices.Burst(root, [f"{root}/cache"])
    for event in (
        FileModifiedEvent(f"{root}/lib/a.c"),
        FileClosedEvent(f"{root}/lib/b.c"),  # nothing changed
        FileMovedEvent(f"{root}/x.c", f"{root}/drv/x.c"),
        DirCreatedEvent(f"{root}/new/sub"),
        DirMovedEvent(f"{root}/old", f"{root}/lib/old"),
        FileModifiedEvent(f"{root}/.git/index"),  # hidden: never listed, never said
        FileModifiedEvent(f"{root}/lib/.a.c.swp"),
        FileModifiedEvent(f"{root}/cache/index/i.sqlite3"),  # ignored: the index's own folder
        FileModifiedEvent(f"{root}/cache/.gitignore"),  # even an ignore file there
    ):
        burst.dispatch(event)
    assert burst.ended() is None  # not QUIET yet
    burst.last -= notices.QUIET
    assert burst.ended() == {
        "folders": [["", False], ["drv", False], ["lib", False], ["lib/old", True], ["new/sub", True], ["old", True]]
    }
    assert burst.ended() is None
    for n in range(notices.MAX_FOLDERS + 1):
        burst.dispatch(FileModifiedEvent(f"{root}/d{n}/a.c"))
    burst.first -= notices.LONGEST  # a burst that goes on is said anyway
    assert burst.ended() == {"all": f"{notices.MAX_FOLDERS + 1} folders changed"}
