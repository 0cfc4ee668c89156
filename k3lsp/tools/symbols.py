"""The workspace's symbol index: where each function, macro, type and global is defined, for `find_definition`
and for naming the callers `find_references` finds.

One sqlite file per workspace beside the result cache (``<cache dir>/index/``, 0700/0600 like the cache: the
index tells which code is on the machine), so it outlives the editor. It is built off the LSP event loop, in a
thread of its own that runs the indexer as a child process, batch by batch, and updated incrementally: each
refresh lists the sources (``search.source_files``: ripgrep's listing, the sandbox's rules applied) and
re-indexes only the files whose mtime or size changed, forgets deleted ones, and commits batch by batch, so a
lookup while it runs sees what is done and says how much that is.

The indexer is, in order:
- the workspace's own ``tags`` file (what ``make tags`` writes), for the files it lists that have not changed
  since it was written, read defensively by ``k3lsp.tools.tagsfile`` (its ex commands are never run);
- universal-ctags (``ctags``, Debian/Homebrew `universal-ctags`) for every other file, run with
  ``--options=NONE`` (no option file from the workspace or home, no CTAGS variable), the file names on stdin
  each prefixed with ``./`` (a name starting with ``-`` would be read as an option), JSON output;
- without ctags, the project's own splitter (``units.parse``) in a child process, with the same output.

A lookup never waits longer than the tool's deadline: while the first build runs it answers from the files
indexed so far and says so. ``warm`` starts the build early (``answers.ToolAnswerer.prepare`` calls it when the
pool starts a unit, once per refresh period); ``SymbolIndex.ready`` lets a coroutine await a build.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from k3lsp.tools import confine, ranking, search, tagsfile
from k3lsp.units import split as units
from k3lsp.wire import cache, isolated

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0  # a lookup starts a refresh when the last one ended longer ago than this
BATCH_FILES = 500  # files per indexer run: the unit of progress and of commit
BATCH_SECONDS = 300.0  # an indexer run that takes longer is killed and its files left unindexed
LIST_SECONDS = 120.0
SCHEMA_VERSION = 1
DEFINITIONS = ("function", "macro", "struct", "union", "enum", "typedef", "variable", "enumerator", "class")
DECLARATIONS = ("prototype", "externvar")  # shown after the definitions
KINDS = frozenset(DEFINITIONS + DECLARATIONS + ("namespace", "type", "global"))  # "type", "global": the splitter's
CTAGS_ARGS = (
    "--options=NONE",  # must come first: no ./.ctags.d, ~/.ctags.d or CTAGS variable
    "-f",
    "-",
    "--output-format=json",
    "--kinds-C=+px-m",
    "--kinds-C++=+px-m",
    "--fields=+neK-P",  # line and end numbers, long kinds; no search pattern (nothing to run, nothing to leak)
    "--extras=-q",
    "-L",
    "-",
)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL)"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS tags (name TEXT NOT NULL, path TEXT NOT NULL, line INTEGER NOT NULL,"
    " end_line INTEGER, kind TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS tags_by_name ON tags (name)",
    "CREATE INDEX IF NOT EXISTS tags_by_place ON tags (path, line)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
)


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
        self._conn = self._open()
        self._thread: threading.Thread | None = None
        self._built = threading.Event()
        self._total: int | None = None
        self._ended = 0.0  # monotonic time the last refresh ended
        self.error = ""

    # --- building -----------------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        """Start a refresh in the background unless one runs or the last one ended under REFRESH_SECONDS ago."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            if not force and self._ended and time.monotonic() - self._ended < REFRESH_SECONDS:
                return
            self._built.clear()
            self._thread = threading.Thread(target=self._refresh, name=f"k3lsp-index {self.root.name}", daemon=True)
            self._thread.start()

    def wait(self, seconds: float | None) -> bool:
        """Block this thread until the running refresh ends (at most ``seconds``); whether it has."""
        thread = self._thread
        return thread is None or self._built.wait(None if seconds is None else max(0.0, seconds))

    async def ready(self) -> Status:
        """Await the running refresh (started if none ran) without blocking the event loop."""
        self.refresh()
        await asyncio.to_thread(self.wait, None)
        return self.status()

    def _refresh(self) -> None:
        try:
            self._update()
            self.error = ""
        except Exception as e:  # the index is a help: its failure is logged and said, never raised
            log.exception("symbol index of %s: refresh failed", self.root)
            self.error = f"{e.__class__.__name__}: {e}"
        finally:
            self._total = None
            self._ended = time.monotonic()
            self._built.set()

    def _update(self) -> None:
        listing = search.source_files(self.root, LIST_SECONDS)
        known = dict(self._query("SELECT path, mtime_ns, size FROM files", map_row=lambda r: (r[0], (r[1], r[2]))))
        stamps = {rel: (info.st_mtime_ns, info.st_size) for rel, info in listing.items()}
        gone = [rel for rel in known if rel not in stamps]
        todo = sorted(rel for rel, stamp in stamps.items() if known.get(rel) != stamp)
        self._total = len(stamps)
        self._forget(gone)
        if not known:
            todo = self._seed(todo, listing)
        indexer = Indexer.pick()
        for start in range(0, len(todo), BATCH_FILES):
            batch = todo[start : start + BATCH_FILES]
            self._store(batch, stamps, indexer.run(self.root, batch))
        self._set_meta(updated=str(time.time()), **({"indexer": indexer.name} if todo else {}))
        log.info("symbol index of %s: %d files, %d re-indexed, %d gone", self.root, len(stamps), len(todo), len(gone))

    def _seed(self, todo: list[str], listing: dict[str, os.stat_result]) -> list[str]:
        """A first build takes what the workspace's own tags file says about the files unchanged since it was
        written; returns the files still to index."""
        seed = tagsfile.read(self.root, listing)
        if seed is None:
            return todo
        by_file: dict[str, list[Tag]] = {rel: [] for rel in seed.files}
        for row in seed.tags:
            by_file[row[1]].append(Tag(*row))
        stamps = {rel: (listing[rel].st_mtime_ns, listing[rel].st_size) for rel in by_file}
        self._store(sorted(by_file), stamps, (tag for tags in by_file.values() for tag in tags))
        self._set_meta(seeded=f"{len(by_file)} files from the workspace's tags file")
        return [rel for rel in todo if rel not in by_file]

    # --- the store ----------------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            cache.make_private(self.path)
            conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if conn.execute("PRAGMA user_version").fetchone()[0] not in (0, SCHEMA_VERSION):
                for table in ("files", "tags", "meta"):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
        except (sqlite3.Error, OSError) as e:  # an index is worth having in memory too
            log.warning("symbol index %s cannot be used (%s): indexing in memory for this process", self.path, e)
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        return conn

    def _query(self, sql: str, params: tuple = (), map_row=None) -> list:
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [map_row(r) for r in rows] if map_row else rows

    def _forget(self, paths: list[str]) -> None:
        with self._lock, self._transaction():
            for rel in paths:
                self._conn.execute("DELETE FROM tags WHERE path=?", (rel,))
                self._conn.execute("DELETE FROM files WHERE path=?", (rel,))

    def _store(self, batch: list[str], stamps: dict[str, tuple[int, int]], tags: Iterable[Tag]) -> None:
        wanted = set(batch)
        rows = [(t.name, t.path, t.line, t.end, t.kind) for t in tags if t.path in wanted]
        with self._lock, self._transaction():
            for rel in batch:
                self._conn.execute("DELETE FROM tags WHERE path=?", (rel,))
                self._conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?)", (rel, *stamps[rel]))
            self._conn.executemany("INSERT INTO tags VALUES (?, ?, ?, ?, ?)", rows)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _set_meta(self, **values: str) -> None:
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())

    def _meta(self, key: str) -> str:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else ""

    # --- lookups ------------------------------------------------------------------------------------------

    def status(self) -> Status:
        updated = self._meta("updated")
        files = self._query("SELECT count(*) FROM files")[0][0]
        indexer = self._meta("indexer")
        seeded = self._meta("seeded")
        indexer = f"{indexer}; {seeded}" if seeded else indexer
        building = self._thread is not None and self._thread.is_alive()
        return Status(files, self._total, building, float(updated) if updated else None, indexer, self.error)

    def definitions(self, name: str, under: str | None = None, caller: ranking.Caller | None = None) -> list[Tag]:
        """Where ``name`` is defined, under a workspace-relative folder or file if given, in ``ranking``'s
        order (definitions first, real bodies before stubs and macros, near the ``caller`` first)."""
        sql = "SELECT name, path, line, end_line, kind FROM tags WHERE name=?"
        params: tuple = (name,)
        if under is not None:
            sql += " AND (path=? OR substr(path, 1, ?)=?)"
            params += (under, len(under) + 1, under + "/")
        tags = self._query(sql, params, map_row=lambda r: Tag(*r))
        return ranking.ordered(tags, caller)

    def enclosing(self, path: str, line: int) -> Tag | None:
        """The function whose definition holds ``line`` of ``path`` (the nearest one above it when the indexer
        gave no end line)."""
        rows = self._query(
            "SELECT name, path, line, end_line, kind FROM tags WHERE path=? AND kind='function' AND line<=?"
            " ORDER BY line DESC LIMIT 1",
            (path, line),
            map_row=lambda r: Tag(*r),
        )
        return rows[0] if rows and (rows[0].end is None or rows[0].end >= line) else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# --- indexers --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Indexer:
    """A child process that reads file names and writes one JSON tag per line, in universal-ctags' shape."""

    name: str
    command: tuple[str, ...]
    prefix: str  # put before each name (ctags reads a line starting with "-" as an option)

    @staticmethod
    def pick() -> Indexer:
        ctags = shutil.which("ctags")
        if ctags is not None and "Universal Ctags" in _version(ctags):
            return Indexer(_version(ctags), (ctags, *CTAGS_ARGS), "./")
        return Indexer.splitter()

    @staticmethod
    def splitter() -> Indexer:
        return Indexer("the k3lsp splitter (universal-ctags not found)", tuple(isolated.python_command(__name__)), "")

    def run(self, root: Path, batch: list[str]) -> list[Tag]:
        names = "".join(f"{self.prefix}{rel}\n" for rel in batch)
        try:
            child = subprocess.run(
                self.command,
                cwd=root,
                input=names.encode(),
                capture_output=True,
                timeout=BATCH_SECONDS,
                env={k: v for k, v in os.environ.items() if k not in ("CTAGS", "ETAGS")},
            )
        except subprocess.TimeoutExpired:
            log.warning(
                "symbol index of %s: %s took over %g s on %d files; skipped", root, self.name, BATCH_SECONDS, len(batch)
            )
            return []
        if child.returncode != 0:
            log.warning(
                "symbol index of %s: %s failed: %s", root, self.name, child.stderr.decode(errors="replace")[-300:]
            )
        return list(_tags(child.stdout.split(b"\n")))


def _version(ctags: str) -> str:
    try:
        out = subprocess.run([ctags, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.split(",", 1)[0].strip()


def _tags(lines: Iterable[bytes]) -> Iterator[Tag]:
    """Tags from JSON lines; anything that is not a well-formed tag of a kind we keep is skipped."""
    for line in lines:
        try:
            tag = json.loads(line)
            name, path, number, kind = tag["name"], tag["path"], tag["line"], tag["kind"]
            end = tag.get("end")
        except (ValueError, KeyError, TypeError):
            continue
        valid = isinstance(name, str) and isinstance(path, str) and isinstance(number, int) and number > 0
        if valid and kind in KINDS and (end is None or (isinstance(end, int) and end >= number)):
            yield Tag(name, path.removeprefix("./"), number, end, kind)


def _split_child() -> None:
    """The splitter as an indexer (in a child process): file names on stdin, JSON tags on stdout."""
    root = Path.cwd().resolve()
    vetter = confine.Vetter(root)
    for rel in sys.stdin.read().split("\n"):
        if not rel or vetter.vet(rel) is None:
            continue
        try:
            parsed = units.parse(confine.read_bytes(root / rel, rel))
        except (confine.ToolError, OSError):
            continue
        found = [
            (u.name, u.start_line, u.end_line, "function") for u in parsed.units if u.kind in ("function", "macro_body")
        ]
        for item in parsed.items:
            if item.kind in ("macro", "type", "global", "prototype"):
                found += [(name, item.start_line, item.end_line, item.kind) for name in item.names]
        for name, start, end, kind in found:
            tag = {"name": name, "path": rel, "line": start + 1, "end": end + 1, "kind": kind}
            sys.stdout.write(json.dumps(tag) + "\n")


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
            index = _indexes[base] = SymbolIndex(base)
        return index


def warm(root: str | os.PathLike[str]) -> None:
    """Start (or refresh) a workspace's index in the background; returns at once (opening the index file is
    left to a thread too), so it may be called from the event loop."""
    base = Path(root).resolve()
    with _registry_lock:
        index = _indexes.get(base)
    if index is not None and index.path.parent == index_dir():
        index.refresh()
    else:
        threading.Thread(target=lambda: index_for(base).refresh(), name="k3lsp-index-open", daemon=True).start()


if __name__ == "__main__":
    _split_child()
