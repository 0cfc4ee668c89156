"""Building and refreshing a workspace's index (``symbols``' sqlite file), in a child process of its own.

The language server only reads the index: listing the tree, stat-ing each file, parsing the indexer's JSON,
reading every file for its words and the sqlite inserts all happen here, in ``python -m k3lsp.tools.build ROOT
DB`` (``symbols.SymbolIndex`` starts it; a build of Linux once held the server's event loop for 3.4 s, issue 44).
Only an index that cannot be kept on disk is built in the server's own thread (``update``).

A refresh lists the workspace (``search.listed``: ripgrep's listing, the sandbox's rules applied), re-indexes
only the files whose mtime or size changed, forgets deleted ones, and commits batch by batch, so a lookup while it
runs sees what is done and says how much that is. It keeps:

- the definitions of the C and C++ sources (``tags``), from, in order: the workspace's own ``tags`` file (what
  ``make tags`` writes), for the files it lists that have not changed since it was written, read defensively by
  ``k3lsp.tools.tagsfile`` (its ex commands are never run); universal-ctags (``ctags``, Debian/Homebrew
  `universal-ctags`) for every other file, run with ``--options=NONE`` (no option file from the workspace or
  home, no CTAGS variable), the file names on stdin each prefixed with ``./`` (a name starting with ``-`` would
  be read as an option), JSON output; without ctags, the project's own splitter (``units.parse``) in a child
  process, with the same output. A file of more than ``DENSE_MACROS`` macros (Linux's generated register headers:
  0.9 M of its 1.7 M macros in 406 files) keeps none: its macros are found by reading it (``symbols``);
- the occurrence index of every listed file (``occurrences``): which files hold each word.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from k3lsp.tools import confine, notices, occurrences, search, tagsfile
from k3lsp.units import split as units
from k3lsp.wire import isolated

log = logging.getLogger(__name__)

BATCH_FILES = 500  # files per indexer run: the unit of progress and of commit
BATCH_SECONDS = 300.0  # an indexer run that takes longer is killed and its files left unindexed
LIST_SECONDS = 120.0
DENSE_MACROS = 500
NICENESS = 10  # the build's priority below the server's (its ctags children inherit it)
SCHEMA_VERSION = 5
DEFINITIONS = ("function", "macro", "struct", "union", "enum", "typedef", "variable", "enumerator", "class")
DECLARATIONS = ("prototype", "externvar")  # shown after the definitions
KINDS = DEFINITIONS + DECLARATIONS + ("namespace", "type", "global")  # "type", "global": the splitter's
KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}  # stored as small numbers
FUNCTION = KIND_CODES["function"]
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
SCHEMA = (
    # source: 1 for a C or C++ file (its definitions are in tags), 0 for any other (its words only);
    # dense: 1 for a source whose macros are not in tags (DENSE_MACROS)
    "CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, mtime_ns INTEGER NOT NULL,"
    " size INTEGER NOT NULL, source INTEGER NOT NULL, dense INTEGER NOT NULL DEFAULT 0)",
    # span: the last line less the first (mostly 0 or small, which sqlite stores in no byte or one)
    "CREATE TABLE IF NOT EXISTS tags (name TEXT NOT NULL, file INTEGER NOT NULL, line INTEGER NOT NULL,"
    " span INTEGER, kind INTEGER NOT NULL, PRIMARY KEY (name, file, line, kind)) WITHOUT ROWID",
    f"CREATE INDEX IF NOT EXISTS functions_by_place ON tags (file, line) WHERE kind={FUNCTION}",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    *occurrences.SCHEMA,
)
TABLES = ("files", "tags", "meta", "postings")

Row = tagsfile.Row  # name, path, line, end line, kind


def connect(path: Path | str) -> sqlite3.Connection:
    """The index at ``path`` (":memory:" for one in memory), its schema made (an older one is dropped)."""
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        with transaction(conn):
            for table in TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return conn


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def set_meta(conn: sqlite3.Connection, **values: str) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())


def meta(conn: sqlite3.Connection, key: str) -> str:
    rows = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchall()
    return rows[0][0] if rows else ""


_SUFFIXES = tuple(glob.removeprefix("*") for glob in search.SOURCE_GLOBS)


def source(rel: str) -> bool:
    """A C or C++ file (``search.SOURCE_GLOBS``), whose definitions are indexed."""
    return rel.endswith(_SUFFIXES)


# --- a refresh ---------------------------------------------------------------------------------------------


def update(conn: sqlite3.Connection, root: Path, folders: Iterable[notices.Folder] | None = None) -> str:
    """Bring the index of ``root`` up to date; what was done, in words (for the log). ``folders``: only the files
    under these (``notices``: what the file system said changed), each listed as a whole refresh lists it; the
    index of every other file is kept as it is."""
    rows = conn.execute("SELECT id, path, mtime_ns, size FROM files").fetchall()
    known = {row[1]: row for row in rows}
    scope = None if folders is None or not known else _walked(folders, known)
    if scope is None:
        listing = search.listed(root, LIST_SECONDS)
        set_meta(conn, listed=str(sum(source(rel) for rel in listing)))
        stamps = {rel: (info.st_mtime_ns, info.st_size) for rel, info in listing.items()}
    else:
        listing = {}
        for folder, deep in scope:
            listing |= search.listed(root, LIST_SECONDS, folder, deep=deep)
        stamps = {rel: (row[2], row[3]) for rel, row in known.items() if not _within(rel, scope)}
        stamps |= {rel: (info.st_mtime_ns, info.st_size) for rel, info in listing.items()}
    gone = [row[0] for rel, row in known.items() if rel not in stamps]
    changed = {rel for rel, stamp in stamps.items() if rel in known and known[rel][2:] != stamp}
    ids = {rel: row[0] for rel, row in known.items() if rel in stamps}
    next_id = max((row[0] for row in known.values()), default=0) + 1
    for n, rel in enumerate(sorted(rel for rel in stamps if rel not in known)):
        ids[rel] = next_id + n
    todo = sorted(rel for rel in stamps if ids[rel] >= next_id or rel in changed)
    dirty = {int(c) for c in json.loads(meta(conn, "dirty") or "[]")}
    dirty |= {file_id // occurrences.CHUNK for file_id in gone + [ids[rel] for rel in todo]}
    with transaction(conn):
        set_meta(conn, dirty=json.dumps(sorted(dirty)))
        conn.execute("DELETE FROM tags WHERE file IN (SELECT value FROM json_each(?))", (json.dumps(gone),))
        conn.executemany("DELETE FROM files WHERE id=?", ((file_id,) for file_id in gone))
    code = [rel for rel in todo if source(rel)]
    if not known:
        code = _seed(conn, root, code, listing, ids)
    old = {ids[rel] for rel in changed}  # files whose tags are to be replaced
    indexer = Indexer.pick()
    for start in range(0, len(code), BATCH_FILES):
        batch = code[start : start + BATCH_FILES]
        _store(conn, batch, stamps, ids, indexer.run(root, batch), old)
    _words(conn, root, dirty, ids, stamps)
    listed = "the whole tree" if scope is None else f"{search.counted(len(scope), 'folder')}, {len(listing)} files"
    set_meta(conn, updated=str(time.time()), refreshed=listed, **({"indexer": indexer.name} if code else {}))
    if len(todo) + len(gone) > len(stamps) // 10:  # pages left part-filled by inserts in name order: packed
        conn.execute("VACUUM")
    if todo or gone:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log back into the file: the index's size is its file
    return f"{listed} listed: {sum(map(source, stamps))} files, {sum(map(source, todo))} re-indexed, {len(gone)} gone"


def _walked(folders: Iterable[notices.Folder], known: Iterable[str]) -> list[notices.Folder] | None:
    """The folders to list, each one the last listing walked into, or the nearest above it that it did (with
    its subfolders); None for the whole tree. ripgrep checks its ignore rules on what it finds below the
    folders it is given, never on those folders themselves: a folder a rule leaves out (``build/``) is only
    left out when it is found from above."""
    walked = {""}
    for rel in known:
        while (rel := rel.rpartition("/")[0]) not in walked:
            walked.add(rel)
    out = set()
    for folder, deep in folders:
        while folder not in walked:
            folder, deep = folder.rpartition("/")[0], True
        if not folder and deep:
            return None
        out.add((folder, deep))
    return sorted(out)


def _within(rel: str, scope: list[notices.Folder]) -> bool:
    """Whether a file is in one of the folders of a refresh."""
    parent = rel.rpartition("/")[0]
    return any(parent == folder or (deep and (not folder or rel.startswith(folder + "/"))) for folder, deep in scope)


def _seed(conn: sqlite3.Connection, root: Path, code: list[str], listing, ids: dict[str, int]) -> list[str]:
    """A first build takes what the workspace's own tags file says about the sources unchanged since it was
    written; returns the sources still to index."""
    seed = tagsfile.read(root, {rel: info for rel, info in listing.items() if source(rel)})
    if seed is None:
        return code
    stamps = {rel: (listing[rel].st_mtime_ns, listing[rel].st_size) for rel in seed.files}
    _store(conn, sorted(seed.files), stamps, ids, seed.tags, set())
    set_meta(conn, seeded=f"{len(seed.files)} files from the workspace's tags file")
    return [rel for rel in code if rel not in seed.files]


def _store(
    conn: sqlite3.Connection,
    batch: list[str],
    stamps: dict[str, tuple[int, int]],
    ids: dict[str, int],
    tags: Iterable[Row],
    old: set[int],
) -> None:
    """One batch of sources: their tags replaced (those of the ``old`` ids deleted first), their stamps
    written."""
    by_file: dict[str, list[Row]] = {rel: [] for rel in batch}
    for tag in tags:
        if tag[1] in by_file:
            by_file[tag[1]].append(tag)
    with transaction(conn):
        replaced = [ids[rel] for rel in batch if ids[rel] in old]
        if replaced:  # one pass over the tags (they are kept by name: no index by file to keep small)
            conn.execute("DELETE FROM tags WHERE file IN (SELECT value FROM json_each(?))", (json.dumps(replaced),))
        for rel, found in by_file.items():
            file_id = ids[rel]
            dense = sum(tag[4] == "macro" for tag in found) > DENSE_MACROS
            kept = [t for t in found if not (dense and t[4] == "macro")]
            conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, 1, ?)", (file_id, rel, *stamps[rel], dense))
            conn.executemany(
                "INSERT OR IGNORE INTO tags VALUES (?, ?, ?, ?, ?)",
                ((n, file_id, line, None if end is None else end - line, KIND_CODES[k]) for n, _, line, end, k in kept),
            )


def _words(
    conn: sqlite3.Connection, root: Path, dirty: set[int], ids: dict[str, int], stamps: dict[str, tuple[int, int]]
) -> None:
    """The occurrence index of every dirty chunk, rebuilt from its files; the other files' stamps written."""
    members: dict[int, list[str]] = {}
    for rel, file_id in ids.items():
        if file_id // occurrences.CHUNK in dirty:
            members.setdefault(file_id // occurrences.CHUNK, []).append(rel)
    for chunk in sorted(dirty):
        found = []
        for rel in members.get(chunk, []):
            try:
                found.append((ids[rel], occurrences.words(confine.read_bytes(root / rel, rel))))
            except (confine.ToolError, OSError):
                found.append((ids[rel], set()))
        with transaction(conn):
            occurrences.write_chunk(conn, chunk, found)
            conn.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, 0, 0)",
                ((ids[rel], rel, *stamps[rel]) for rel in members.get(chunk, []) if not source(rel)),
            )
            set_meta(conn, dirty=json.dumps(sorted(c for c in dirty if c > chunk)))


# --- indexers ----------------------------------------------------------------------------------------------


class Indexer:
    """A child process that reads file names and writes one JSON tag per line, in universal-ctags' shape."""

    def __init__(self, name: str, command: tuple[str, ...], prefix: str) -> None:
        self.name = name
        self.command = command
        self.prefix = prefix  # put before each name (ctags reads a line starting with "-" as an option)

    @staticmethod
    def pick() -> Indexer:
        ctags = shutil.which("ctags")
        if ctags is not None and "Universal Ctags" in _version(ctags):
            return Indexer(_version(ctags), (ctags, *CTAGS_ARGS), "./")
        return Indexer(
            "the k3lsp splitter (universal-ctags not found)",
            tuple(isolated.python_command("k3lsp.tools.build", "--split")),
            "",
        )

    def run(self, root: Path, batch: list[str]) -> list[Row]:
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


def _tags(lines: Iterable[bytes]) -> Iterator[Row]:
    """Tags from JSON lines; anything that is not a well-formed tag of a kind we keep is skipped."""
    for line in lines:
        try:
            tag = json.loads(line)
            name, path, number, kind = tag["name"], tag["path"], tag["line"], tag["kind"]
            end = tag.get("end")
        except (ValueError, KeyError, TypeError):
            continue
        valid = isinstance(name, str) and isinstance(path, str) and isinstance(number, int) and number > 0
        if valid and kind in KIND_CODES and (end is None or (isinstance(end, int) and end >= number)):
            yield name, path.removeprefix("./"), number, end, kind


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


def _main(argv: list[str]) -> int:
    """``ROOT DB``: refresh the index (``ROOT DB --folders``: only the folders of a JSON list of ``[folder, deep]``
    on stdin); ``--split``: the splitter as an indexer."""
    if argv == ["--split"]:
        _split_child()
        return 0
    root, path = Path(argv[0]), Path(argv[1])
    folders = [(str(f), bool(deep)) for f, deep in json.load(sys.stdin)] if argv[2:] == ["--folders"] else None
    with contextlib.suppress(AttributeError, OSError):  # below the server and its tool calls on busy cores
        os.nice(NICENESS)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    conn = connect(path)
    try:
        print(update(conn, root, folders), flush=True)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
