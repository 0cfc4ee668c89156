"""The splits the editor keeps across restarts (``k3lsp.core.splits``, issue 44): a file opened again unchanged shows
its cached findings from the kept split, with the daemon down, not after a new split; the store answers only the
same text under the same macro table, keeps a bounded number, and a row that is not units is a miss."""

from __future__ import annotations

import sqlite3

import pytest

from k3lsp.core.splits import SplitStore
from k3lsp.units import split as units
from k3lsp.units.kernelc import Macros
from tests.lsp import scripted
from tests.support.lsp import editor

TEXT = scripted.DEMO_C


def test_a_kept_split_answers_the_same_text_and_macros_only(tmp_path):
    path = tmp_path / "c" / "splits.sqlite3"
    split = units.split(TEXT)
    SplitStore(path).put(TEXT, Macros(), split)
    store = SplitStore(path)  # another session
    assert store.get(TEXT, Macros()) == split
    assert store.get(TEXT + "\n", Macros()) is None
    assert store.get(TEXT, Macros.parse({"loops": ["k3_walk_*"]})) is None
    assert store.stats() == {"hits": 1, "misses": 2, "off": False}
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"


def test_the_least_recently_used_split_goes_first(tmp_path):
    store = SplitStore(tmp_path / "splits.sqlite3", kept=2)
    texts = [f"int f{i}(void) {{ return {i}; }}\n" for i in range(3)]
    for text in texts[:2]:
        store.put(text, Macros(), units.split(text))
    assert store.get(texts[0], Macros()) is not None  # used: texts[1] is now the oldest
    store.put(texts[2], Macros(), units.split(texts[2]))
    assert [store.get(t, Macros()) is not None for t in texts] == [True, False, True]


def test_a_row_that_is_not_units_is_a_miss_and_an_unusable_store_splits_again(tmp_path):
    path = tmp_path / "splits.sqlite3"
    store = SplitStore(path)
    store.put(TEXT, Macros(), units.split(TEXT))
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE splits SET units = ?", (b"\x78\x9c garbage",))
    assert SplitStore(path).get(TEXT, Macros()) is None
    (tmp_path / "file").write_text("")
    off = SplitStore(tmp_path / "file" / "splits.sqlite3")  # its folder is a file
    off.put(TEXT, Macros(), units.split(TEXT))
    assert off.get(TEXT, Macros()) is None and off.stats()["off"] is True


@pytest.mark.logic
async def test_a_file_opened_again_unchanged_shows_its_cached_findings_from_the_kept_split(fake, tmp_path):
    root = scripted.workspace(tmp_path)
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        first = (await ed.status())["splits"]
    fake.write({"state": "unreachable"})  # the daemon is down: only the cache answers
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        shown = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        again = (await ed.status())["splits"]
    assert first["hits"] == 0 and again["hits"] >= 1 and again["misses"] == 0  # never split anew
    assert sorted(d.code for d in shown) == ["CWE-129", "CWE-787"]
