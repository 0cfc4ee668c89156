"""The result cache on disk: a full disk is not corruption, and the file is private (0600 in a 0700 folder).

A full disk was once taken for a corrupt file: the healthy cache was moved aside and every earlier result
lost. Here a real small file system (a tmpfs of a few hundred KiB, mounted when the machine allows it) is
filled, and SQLITE_FULL is also produced by sqlite itself (``max_page_count``) where nothing can be mounted.
Only real corruption still moves the file aside (tests/lsp/test_cache.py).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import subprocess
import uuid

import pytest

from k3lsp.wire import cache

ROW = [{"message": "x" * 2000}]


def corrupt_copies(folder) -> list[str]:
    return [p.name for p in folder.iterdir() if ".corrupt-" in p.name]


@contextlib.contextmanager
def small_filesystem(tmp_path, size_kib: int):
    """A tmpfs of ``size_kib`` KiB at tmp_path/fs, unmounted afterwards; skips where mounting is not allowed."""
    point = tmp_path / "fs"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


def fill(folder) -> int:
    """Write a filler file until the file system is full; returns the bytes written."""
    written = 0
    fd = os.open(folder / f"filler-{uuid.uuid4().hex}", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                written += os.write(fd, b"\0" * 1024)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written
    finally:
        os.close(fd)


def test_a_full_disk_keeps_the_cache_and_says_the_disk_is_full(tmp_path, caplog):
    with small_filesystem(tmp_path, 512) as fs:
        store = cache.ResultCache(fs / "c" / cache.FILE_NAME)
        for i in range(5):
            store.put(f"kept{i}", "r", ROW)
        assert fill(fs) > 0
        with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
            for i in range(40):  # the WAL grows until the disk refuses it
                store.put(f"new{i}", "r", ROW)
        assert "the disk is full" in caplog.text
        assert corrupt_copies(fs / "c") == []
        assert all(store.get(f"kept{i}", "r") is not None for i in range(5))
        store.close()
        for filler in fs.glob("filler-*"):
            filler.unlink()
        again = cache.ResultCache(fs / "c" / cache.FILE_NAME)  # a new process: every earlier result is there
        assert all(again.get(f"kept{i}", "r") is not None for i in range(5))
        again.put("after", "r", ROW)
        assert again.get("after", "r") is not None
        again.close()


def test_sqlite_full_is_not_corruption(tmp_path, caplog):
    """SQLITE_FULL from sqlite itself, on any machine: the database may not grow past max_page_count."""
    store = cache.ResultCache(tmp_path / cache.FILE_NAME)
    for i in range(5):
        store.put(f"kept{i}", "r", ROW)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count={pages}")
    with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
        for i in range(20):
            store.put(f"new{i}", "r", ROW)
    assert "the disk is full" in caplog.text and "SQLITE_FULL" in caplog.text
    assert corrupt_copies(tmp_path) == []
    assert all(store.get(f"kept{i}", "r") is not None for i in range(5))
    assert store.stats()["entries"] >= 5


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_cache_is_0600_in_a_0700_folder(tmp_path):
    old = os.umask(0o022)  # the usual umask: files 0644, folders 0755
    try:
        store = cache.ResultCache(tmp_path / "cache" / cache.FILE_NAME)
        store.put("k", "r", ROW)
    finally:
        os.umask(old)
    folder = tmp_path / "cache"
    assert mode(folder) == 0o700
    files = [p for p in folder.iterdir() if p.name.startswith(cache.FILE_NAME)]
    assert {p.name for p in files} >= {cache.FILE_NAME, cache.FILE_NAME + "-wal"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    store.close()


def test_the_folders_made_above_a_private_file_are_private_too(tmp_path):
    old = os.umask(0o022)
    try:
        cache.make_private(tmp_path / "cache" / "index" / "x.sqlite3")  # the symbol index, before any result
    finally:
        os.umask(old)
    assert mode(tmp_path / "cache") == 0o700 and mode(tmp_path / "cache" / "index") == 0o700


def test_an_existing_looser_cache_is_tightened(tmp_path):
    folder = tmp_path / "cache"
    cache.ResultCache(folder / cache.FILE_NAME).close()
    folder.chmod(0o755)
    (folder / cache.FILE_NAME).chmod(0o644)
    store = cache.ResultCache(folder / cache.FILE_NAME)
    store.put("k", "r", ROW)
    assert mode(folder) == 0o700 and mode(folder / cache.FILE_NAME) == 0o600
    assert all(mode(p) == 0o600 for p in folder.glob(cache.FILE_NAME + "-*"))
    store.close()


def test_a_cache_file_that_is_a_symlink_is_not_used(tmp_path, caplog):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.sqlite3"
    (folder / cache.FILE_NAME).symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
        store = cache.ResultCache(folder / cache.FILE_NAME)
    store.put("k", "r", ROW)
    assert store.get("k", "r") is not None and not target.exists()  # cached in memory, nothing written through the link
    assert "caching in memory" in caplog.text


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_folder_of_another_user_is_not_used(tmp_path, caplog):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o777)
    os.chown(folder, 65534, 65534)
    with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
        store = cache.ResultCache(folder / cache.FILE_NAME)
    store.put("k", "r", ROW)
    assert store.get("k", "r") is not None and not (folder / cache.FILE_NAME).exists()
    assert "belongs to another user" in caplog.text
