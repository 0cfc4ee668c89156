"""The workspace's index: where each function, macro, type and global is defined, for `find_definition` and for
naming the callers `find_references` finds, and which files hold each word, for `find_references` and `grep`.

One sqlite file per workspace beside the result cache (``<cache dir>/index/``, 0700/0600 like the cache: the
index tells which code is on the machine), so it outlives the editor. This module only reads it: it is built and
refreshed by ``k3lsp.tools.build`` in a child process (one at a time, from a thread that waits for it), which
commits batch by batch, so a lookup while it runs sees what is done and says how much that is. Once a whole
refresh has run under the file system's change notices (``notices``), a refresh lists only the folders they
name, as soon as they name them; without notices, a lookup lists the whole tree again at most every
REFRESH_SECONDS.

A lookup never waits longer than the tool's deadline: while the first build runs it answers from the files
indexed so far and says so. ``warm`` starts the build early (``answers.ToolAnswerer.prepare`` calls it when the
pool starts a unit, once per refresh period); ``SymbolIndex.ready`` lets a coroutine await a build.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import logging
import os
import re
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from k3lsp.tools import build, confine, notices, occurrences, ranking, search
from k3lsp.wire import cache, isolated

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0  # unwatched, a lookup refreshes the whole tree when the last refresh ended longer ago
BUILD_SECONDS = 4 * 3600.0  # a build that takes longer is killed (Linux: a few minutes on 2 busy cores)
DEFINITIONS, DECLARATIONS = build.DEFINITIONS, build.DECLARATIONS
_TAG_SQL = "SELECT name, path, line, line + span, kind FROM tags JOIN files ON files.id = tags.file"


@dataclass(frozen=True)
class Tag:
    name: str
    path: str  # workspace-relative, posix
    line: int  # 1-based
    end: int | None  # last line, when the indexer knows it
    kind: str

    @property
    def declaration(self) -> bool:
        return self.kind in DECLARATIONS


@dataclass(frozen=True)
class Status:
    """What the index covers now: what every answer built on it reports."""

    files: int  # files indexed
    total: int | None  # files the running refresh listed (None: it is still listing, or none runs)
    building: bool  # a refresh runs
    updated: float | None  # wall time the last complete build ended (None: none has)
    indexer: str
    error: str = ""  # why the last refresh failed
    refreshed: str = ""  # what the last refresh listed: "the whole tree" or the folders the change notices named

    @property
    def complete(self) -> bool:
        """A build has ended (a refresh may be updating it meanwhile)."""
        return self.updated is not None

    def describe(self) -> str:
        """e.g. "the symbol index of 45,908 files (Universal Ctags 5.9.0), updated 20 s ago"."""
        if self.updated is None and self.building:
            total = "?" if self.total is None else f"{self.total:,}"
            return f"the symbol index, still being built: {self.files:,} of {total} files indexed so far"
        what = f"the symbol index of {search.counted(self.files, 'file')} ({self.indexer or 'no indexer'})"
        if self.updated is None:
            return f"{what}, whose build failed ({self.error or 'no reason given'})"
        what += f", updated {_ago(time.time() - self.updated)} ago"
        if self.error:
            what += f" (its last refresh failed: {self.error})"
        return what + ("; a refresh is running" if self.building else "")


def _ago(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.0f} h"
    )


def index_dir() -> Path:
    return cache.default_path().parent / "index"


class SymbolIndex:
    """The index of one workspace root. Thread-safe: one connection behind a lock, one refresh at a time."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.path = index_dir() / (hashlib.sha256(str(self.root).encode()).hexdigest()[:32] + ".sqlite3")
        self._lock = threading.Lock()
        self._conn, self._memory = self._open()
        self._running = False
        self._again: bool | None = None  # a refresh asked for while one ran (True: forced)
        self._built = threading.Event()
        self._built.set()
        self._ended = 0.0  # monotonic time the last refresh ended
        self._whole: float | None = None  # monotonic time the last whole refresh that ended well began
        self._notices: notices.Notices | None = None
        self._dense_files: tuple[str, dict[int, str]] = ("", {})
        self.error = ""

    # --- building -----------------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False, watch: bool = True) -> None:
        """Bring the index up to date in the background: the folders the change notices named, or, while they
        do not cover every change since a whole refresh, the whole tree (unless the last refresh ended under
        REFRESH_SECONDS ago). ``force``: the whole tree now. Asked for while a refresh runs, it starts when
        that one ends (``wait`` waits for both). ``watch``: start the notices if they have not started; a
        lookup does, ``warm`` does not (a process that audits but never looks anything up needs no watch)."""
        with self._lock:
            if self._notices is None and watch:  # whole refreshes from now on are covered by the notices
                unlisted = (*confine.secret_places(), self.path.parent)  # the index's own writes among them
                self._notices = notices.Notices(self.root, self.refresh, unlisted)
            if self._running:
                self._again = force or self._again is True
                return
            folders = self._notices.take() if self._notices is not None else None
            if force or self._notices is None or not self._notices.covers(self._whole):
                stale = force or not self._ended or time.monotonic() - self._ended >= REFRESH_SECONDS
                folders = None if stale else []  # the whole listing sees what the notices named
            if folders == []:
                self._built.set()
                return
            self._running, self._again = True, None
            self._built.clear()
            threading.Thread(
                target=self._refresh, args=(folders,), name=f"k3lsp-index {self.root.name}", daemon=True
            ).start()

    def wait(self, seconds: float | None) -> bool:
        """Block this thread until the running refresh ends (at most ``seconds``); whether it has."""
        return self._built.wait(None if seconds is None else max(0.0, seconds))

    async def ready(self) -> Status:
        """Await the running refresh (started if none ran) without blocking the event loop."""
        self.refresh(watch=False)
        await asyncio.to_thread(self.wait, None)
        return self.status()

    def watched(self) -> bool:
        """Whether refreshes now list only what the change notices name."""
        return self._notices is not None and self._notices.covers(self._whole)

    def _refresh(self, folders: list[notices.Folder] | None) -> None:
        began = time.monotonic()
        try:
            done = build.update(self._conn, self.root, folders) if self._memory else self._build(folders)
            log.info("symbol index of %s: %s", self.root, done)
            self.error = ""
            self._whole = began if folders is None else self._whole
        except Exception as e:  # the index is a help: its failure is logged and said, never raised
            log.exception("symbol index of %s: refresh failed", self.root)
            self.error = f"{e.__class__.__name__}: {e}"
            if folders is not None and self._notices is not None:
                self._notices.add(folders)
        finally:
            with self._lock:
                self._ended, self._running = time.monotonic(), False
                again, self._again = self._again, None
                if again is None:
                    self._built.set()
        if again is not None:
            self.refresh(force=again, watch=False)

    def _build(self, folders: list[notices.Folder] | None) -> str:
        """The refresh in its child process (``k3lsp.tools.build``); what it did."""
        scoped = () if folders is None else ("--folders",)
        command = isolated.python_command("k3lsp.tools.build", str(self.root), str(self.path), *scoped)
        try:
            child = subprocess.run(
                command, capture_output=True, timeout=BUILD_SECONDS, input=json.dumps(folders or []).encode()
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the index build took over {BUILD_SECONDS:g} s and was stopped") from None
        for line in child.stderr.decode("utf-8", "replace").splitlines()[-20:]:
            log.warning("index build: %s", line)
        if child.returncode != 0:
            raise RuntimeError(child.stderr.decode("utf-8", "replace").strip().rsplit("\n", 1)[-1][-300:])
        return child.stdout.decode("utf-8", "replace").strip()

    # --- the store ----------------------------------------------------------------------------------------

    def _open(self) -> tuple[sqlite3.Connection, bool]:
        """The index file (the child builds it), or an index in memory that this process builds."""
        try:
            cache.make_private(self.path)
            return build.connect(self.path), False
        except (sqlite3.Error, OSError) as e:  # an index is worth having in memory too
            log.warning("symbol index %s cannot be used (%s): indexing in memory for this process", self.path, e)
            return build.connect(":memory:"), True

    def _query(self, sql: str, params: tuple = (), map_row=None) -> list:
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [map_row(r) for r in rows] if map_row else rows

    def _meta(self, key: str) -> str:
        with self._lock:
            return build.meta(self._conn, key)

    # --- lookups ------------------------------------------------------------------------------------------

    def status(self) -> Status:
        updated = self._meta("updated")
        files = self._query("SELECT count(*) FROM files WHERE source=1")[0][0]
        indexer = self._meta("indexer")
        seeded = self._meta("seeded")
        indexer = f"{indexer}; {seeded}" if seeded else indexer
        building = self._running
        listed = self._meta("listed")
        total = int(listed) if building and listed else None
        when = float(updated) if updated else None
        return Status(files, total, building, when, indexer, self.error, self._meta("refreshed"))

    def words_ready(self) -> bool:
        """Whether the occurrence index is whole: a build has ended and no chunk waits for a refresh."""
        return bool(self._meta("updated")) and self._meta("dirty") in ("", "[]")

    def definitions(self, name: str, under: str | None = None, caller: ranking.Caller | None = None) -> list[Tag]:
        """Where ``name`` is defined, under a workspace-relative folder or file if given, in ``ranking``'s
        order (definitions first, real bodies before stubs and macros, near the ``caller`` first)."""
        sql = _TAG_SQL + " WHERE name=?"
        params: tuple = (name,)
        if under is not None:
            sql += " AND (path=? OR substr(path, 1, ?)=?)"
            params += (under, len(under) + 1, under + "/")
        tags = self._query(sql, params, map_row=lambda r: Tag(r[0], r[1], r[2], r[3], build.KINDS[r[4]]))
        tags += self._dense_macros(name, under)
        return ranking.ordered(tags, caller)

    def _dense_macros(self, name: str, under: str | None) -> list[Tag]:
        """The macros named ``name`` in the files whose macros the index does not keep (``build.DENSE_MACROS``),
        found by reading the files that hold the word."""
        define = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+" + re.escape(name.encode()) + rb"(?![A-Za-z0-9_])", re.M)
        found = []
        dense = self._dense()
        with self._lock:
            ids = occurrences.files_with(self._conn, name) if dense else []
        paths = sorted(dense[i] for i in ids if i in dense)
        for path in [p for p in paths if under is None or p == under or p.startswith(under + "/")]:
            try:
                data = confine.read_bytes(confine.resolve(self.root, path), path)
            except confine.ToolError:
                continue
            for match in define.finditer(data):
                line = data.count(b"\n", 0, match.start()) + 1
                found.append(Tag(name, path, line, _macro_end(data, match.start(), line), "macro"))
        return found

    def _dense(self) -> dict[int, str]:
        """The files whose macros the index leaves out, by id (read again after each build)."""
        updated = self._meta("updated")
        if self._dense_files[0] != updated:
            self._dense_files = (updated, dict(self._query("SELECT id, path FROM files WHERE dense=1")))
        return self._dense_files[1]

    def files_with(self, word: str, under: str | None = None, *, sources: bool = False) -> list[str]:
        """The files (workspace-relative, sorted) under ``under`` that may hold ``word``, from the occurrence
        index: only C and C++ files if ``sources``."""
        sql = "SELECT path FROM files WHERE id IN (SELECT value FROM json_each(?))"
        sql += " AND source=1" if sources else ""
        with self._lock:
            ids = occurrences.files_with(self._conn, word)
            paths = [row[0] for row in self._conn.execute(sql, (json.dumps(ids),))]
        if under is not None:
            paths = [p for p in paths if p == under or p.startswith(under + "/")]
        return sorted(paths)

    def enclosing(self, places: list[tuple[str, int]]) -> list[Tag | None]:
        """For each (path, line), the function whose definition holds it (the nearest one above it when the
        indexer gave no end line), or None; one query a file."""
        functions: dict[str, list[tuple[int, int | None, str]]] = {}
        for path in dict.fromkeys(path for path, _ in places):
            functions[path] = self._query(
                "SELECT line, line + span, name FROM tags WHERE file=(SELECT id FROM files WHERE path=?)"
                f" AND kind={build.FUNCTION} ORDER BY line",
                (path,),
            )
        out: list[Tag | None] = []
        for path, line in places:
            rows = functions[path]
            i = bisect.bisect_right(rows, (line, float("inf"))) - 1
            start, end, name = rows[i] if i >= 0 else (0, None, "")
            out.append(Tag(name, path, start, end, "function") if i >= 0 and (end is None or end >= line) else None)
        return out

    def unwatch(self) -> None:
        """End the change notices' child; refreshes list the whole tree from now on."""
        if self._notices is not None:
            self._notices.close()

    def close(self) -> None:
        self.unwatch()
        with self._lock:
            self._conn.close()


def _macro_end(data: bytes, start: int, line: int) -> int:
    """The last line of the #define at ``start`` (its lines joined by a backslash at their end)."""
    end = line
    eol = data.find(b"\n", start)
    while eol > 0 and data[:eol].rstrip(b"\r").endswith(b"\\"):
        end += 1
        eol = data.find(b"\n", eol + 1)
    return end


# --- one index per workspace -----------------------------------------------------------------------------

_indexes: dict[Path, SymbolIndex] = {}
_registry_lock = threading.Lock()


def index_for(root: str | os.PathLike[str]) -> SymbolIndex:
    """This process's index of a workspace root (opened on first use; its refreshes are shared)."""
    base = Path(root).resolve()
    store = index_dir()
    with _registry_lock:
        index = _indexes.get(base)
        if index is None or index.path.parent != store:
            if index is not None:  # another cache directory (tests, a bench): the old index is no longer used
                index.unwatch()
            index = _indexes[base] = SymbolIndex(base)
        return index


def warm(root: str | os.PathLike[str]) -> None:
    """Start (or refresh) a workspace's index in the background; returns at once (opening the index file is
    left to a thread too), so it may be called from the event loop."""
    base = Path(root).resolve()
    with _registry_lock:
        index = _indexes.get(base)
    if index is not None and index.path.parent == index_dir():
        index.refresh(watch=False)
    else:
        threading.Thread(
            target=lambda: index_for(base).refresh(watch=False), name="k3lsp-index-open", daemon=True
        ).start()
