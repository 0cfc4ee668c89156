"""Content-addressed audit results in sqlite: the editor's and the batch tools' cache, and the daemon's team result
store (``backend/store.py``) on the same table.

An audit of one unit costs seconds to minutes on the Mac pair (docs/architecture.md); the
same unit text and context, audited by the same model with the same prompt, gives the same answer
for our purposes. So results are keyed by (unit key, result key: ``k3lsp.wire.address``, which names the
model's checkpoint, the prompt version, the thinking effort and the daemon) and kept across processes
and restarts. Only complete audits are stored (``address.cut_short``). Several processes (an editor per window, a
batch audit) share one file: WAL mode and a busy timeout let them read and write concurrently.
A cache is an optimisation, never a reason to fail: a corrupt file (sqlite says SQLITE_CORRUPT or
SQLITE_NOTADB) is moved aside (logged) and a fresh one created. Any other failure (a full disk, a busy or
read-only file) skips the one operation with a log line that says which, and keeps the file: a full disk
is not corruption, and moving a healthy cache aside would lose every earlier result.

The results tell which code other users of the machine may audit, so the file is created 0600 in a 0700
folder, looser existing ones are tightened, and a folder of another user or a cache file that is a
symlink is not used at all (the cache is then kept in memory for this process).

The cache is bounded in bytes (``K3LSP_CACHE_MAX_BYTES``, default 256 MiB of results): when a new result
takes it over the bound, the least recently used results go (down to 90 %, so not at every write), logged
and counted in ``stats()``. Reads mark a result used at most once a minute (``TOUCH_SECONDS``), so a
lookup stays a read. One result is itself bounded (``k3lsp.wire.bounds``).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

log = logging.getLogger(__name__)

ENV_DIR = "K3LSP_CACHE_DIR"
ENV_MAX_BYTES = "K3LSP_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
EVICT_TO = 0.9  # an eviction frees down to this share of the bound
# The total is measured (a sum over the table) once this process has written this share of the bound since the
# last measure: every put would make a workspace audit quadratic, and each writer of a shared file measures what
# it adds, so the file exceeds its bound by at most this share per writer.
MEASURE_SHARE = 0.01
TOUCH_SECONDS = 60.0
FILE_NAME = "results.sqlite3"
SCHEMA_VERSION = 2  # 1 keyed results by model name and stored cut-short audits: dropped
BUSY_TIMEOUT_S = 10.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS results (
    unit_key TEXT NOT NULL,
    result_key TEXT NOT NULL, -- address.ResultKey.digest()
    bytes INTEGER NOT NULL,   -- len(findings) + len(stats): what the byte bound counts
    used REAL NOT NULL,       -- unix time of the last write or read (TOUCH_SECONDS apart): LRU order
    created REAL NOT NULL,    -- unix time
    findings TEXT NOT NULL,   -- JSON list of finding dicts (findings.Finding.to_dict)
    stats TEXT NOT NULL,      -- JSON object: the backend's `done` stats
    PRIMARY KEY (unit_key, result_key)
) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS results_by_use ON results (used)",
    # What each daemon served when it last answered (address.ResultKey without the effort): its results can be
    # found at once after a restart, before (or without) a new hello.
    """CREATE TABLE IF NOT EXISTS daemons (
    identity TEXT PRIMARY KEY,  -- DaemonClient.daemon_identity
    fingerprint TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    seen REAL NOT NULL          -- unix time of the welcome
) WITHOUT ROWID""",
)


@dataclass(frozen=True)
class CachedResult:
    findings: list[dict[str, Any]]
    stats: dict[str, Any]
    created: float


def default_path() -> Path:
    """`$K3LSP_CACHE_DIR/results.sqlite3`, else the platform's user cache dir for k3lsp."""
    root = os.environ.get(ENV_DIR) or platformdirs.user_cache_dir("k3lsp")
    return Path(root) / FILE_NAME


def logged(problem: str) -> None:
    """Where a cache's set-up problems go unless its owner shows them itself (the batch tool's warnings)."""
    log.warning("%s", problem)


def default_max_bytes(on_problem: Callable[[str], None] = logged) -> int:
    """`$K3LSP_CACHE_MAX_BYTES` (a positive number of bytes), else DEFAULT_MAX_BYTES (an invalid value is said)."""
    raw = os.environ.get(ENV_MAX_BYTES)
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
        if value <= 0:
            raise ValueError("not positive")
    except ValueError:
        on_problem(
            f"{ENV_MAX_BYTES}={raw!r} is not a positive whole number of bytes: the cache keeps its default bound, "
            f"{DEFAULT_MAX_BYTES:,} bytes; set it to one such as 1000000000, or unset it"
        )
        return DEFAULT_MAX_BYTES
    return value


class ResultCache:
    """The result cache. Thread-safe (one connection behind a lock); process-safe through sqlite."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        max_bytes: int | None = None,
        on_problem: Callable[[str], None] = logged,
    ) -> None:
        """``on_problem`` is told, in one sentence, when the settings cannot be followed (an unusable cache
        folder: the cache is kept in memory; an invalid size: the default is used)."""
        self._on_problem = on_problem
        self.path = Path(path) if path is not None else default_path()
        self.max_bytes = max_bytes if max_bytes is not None else default_max_bytes(on_problem)
        self.hits = 0
        self.misses = 0
        self.evicted = 0  # results this process removed to stay within max_bytes
        self.refused = 0  # results larger than max_bytes on their own, never stored
        self._unmeasured = self.max_bytes  # bytes written since the total was last measured: the first put measures
        self._lock = threading.Lock()
        self._conn = self._open()

    # --- public API ---------------------------------------------------------------------------------------

    def get(self, unit_key: str, result_key: str) -> CachedResult | None:
        row = self._run(
            "SELECT findings, stats, created, used FROM results WHERE unit_key=? AND result_key=?",
            (unit_key, result_key),
        )
        if row is None:
            self.misses += 1
            return None
        try:
            findings, stats = json.loads(row[0]), json.loads(row[1])
            if not isinstance(findings, list) or not isinstance(stats, dict):
                raise ValueError("wrong JSON types")
        except ValueError as e:  # a row written by something else: treat as a miss
            log.warning("ignoring an unreadable cache row for %s: %s", unit_key[:12], e)
            self.misses += 1
            return None
        self.hits += 1
        now = time.time()
        if now - row[3] > TOUCH_SECONDS:
            self._run(
                "UPDATE results SET used=? WHERE unit_key=? AND result_key=?", (now, unit_key, result_key), write=True
            )
        return CachedResult(findings, stats, row[2])

    def under(self, unit_key: str) -> list[str]:
        """The result keys of every result filed under ``unit_key``, oldest first (the daemon's store files one
        result per requester under each key, backend/store.py)."""

        def work(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT result_key FROM results WHERE unit_key=? ORDER BY created", (unit_key,))
            return [row[0] for row in rows]

        return self._db(work) or []

    def put(
        self,
        unit_key: str,
        result_key: str,
        findings: list[dict[str, Any]],
        stats: dict[str, Any] | None = None,
    ) -> None:
        """Store a result (replacing one under the same keys), then evict the least recently used beyond
        ``max_bytes``; a result larger than the whole bound is not stored (logged)."""
        found, numbers = json.dumps(findings), json.dumps(stats or {})
        size = len(found) + len(numbers)
        if size > self.max_bytes:
            self.refused += 1
            log.warning(
                "result of %d bytes for %s is larger than the cache (%d bytes): not cached",
                size,
                unit_key[:12],
                self.max_bytes,
            )
            return
        now = time.time()
        self._run(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
            (unit_key, result_key, size, now, now, found, numbers),
            write=True,
        )
        self._unmeasured += size
        if self._unmeasured >= self.max_bytes * MEASURE_SHARE:
            self._unmeasured = 0
            self._db(self._evict)

    def _evict(self, conn: sqlite3.Connection) -> None:
        """Remove least recently used results until the total is EVICT_TO of max_bytes."""
        total = conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM results").fetchone()[0]
        if total <= self.max_bytes:
            return
        excess, freed, victims = total - int(self.max_bytes * EVICT_TO), 0, []
        for unit_key, result_key, size in conn.execute("SELECT unit_key, result_key, bytes FROM results ORDER BY used"):
            victims.append((unit_key, result_key))
            freed += size
            if freed >= excess:
                break
        conn.executemany("DELETE FROM results WHERE unit_key=? AND result_key=?", victims)
        self.evicted += len(victims)
        log.info(
            "result cache over %d bytes: evicted the %d least recently used results (%d bytes)",
            self.max_bytes,
            len(victims),
            freed,
        )

    def remember(self, identity: str, fingerprint: str, prompt_version: str) -> None:
        """What the daemon with this identity serves, as its last welcome said."""
        self._run(
            "INSERT OR REPLACE INTO daemons VALUES (?, ?, ?, ?)",
            (identity, fingerprint, prompt_version, time.time()),
            write=True,
        )

    def recall(self, identity: str) -> tuple[str, str] | None:
        """(fingerprint, prompt version) of the daemon with this identity when it last answered; None if never."""
        row = self._run("SELECT fingerprint, prompt_version FROM daemons WHERE identity=?", (identity,))
        return (row[0], row[1]) if row else None

    def stats(self) -> dict[str, Any]:
        row = self._run(
            "SELECT COUNT(*), COUNT(DISTINCT result_key), COALESCE(SUM(bytes), 0), MIN(created), MAX(created) "
            "FROM results"
        )
        entries, keys, results, oldest, newest = row if row else (0, 0, 0, None, None)
        try:
            size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))
        except OSError:
            size = 0
        return {
            "path": str(self.path),
            "entries": entries,
            "result_keys": keys,
            "bytes": size,
            "result_bytes": results,
            "max_bytes": self.max_bytes,
            "oldest": oldest,
            "newest": newest,
            "hits": self.hits,
            "misses": self.misses,
            "evicted": self.evicted,
            "refused": self.refused,
        }

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # --- internals ----------------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        """Open the file; a corrupt one is moved aside; an unusable location falls back to memory."""
        try:
            try:
                return self._connect(self.path)
            except sqlite3.DatabaseError as e:
                if not _corrupt(e):
                    raise
                self._move_aside(e)
                return self._connect(self.path)
        except (sqlite3.Error, OSError) as e:
            self._on_problem(self._unusable(e))
            return self._connect(":memory:")

    def _unusable(self, error: Exception) -> str:
        """Why the file cannot be used, naming the setting that chose it and what to do."""
        env = os.environ.get(ENV_DIR)
        default = self.path == default_path()
        where = (
            f"{ENV_DIR}={env!r} cannot hold the result cache"
            if env and default
            else f"result cache {self.path} cannot be used"
        )
        said = f"{where} ({_why(error)}): caching in memory for this process only"
        if not default:  # a path its owner chose (the eval's, a test's): no setting to change
            return said
        return f"{said}; set {ENV_DIR} to a directory you can write" + (", or unset it" if env else "")

    def _connect(self, path: Path | str) -> sqlite3.Connection:
        if isinstance(path, Path):
            make_private(path)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 1:
                conn.execute("DROP TABLE IF EXISTS results")
                log.info("result cache %s: dropped results of an older version (keyed by model name)", path)
            elif version not in (0, SCHEMA_VERSION):
                raise _Foreign(f"schema version {version}, expected {SCHEMA_VERSION}")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def _move_aside(self, error: Exception) -> None:
        """Rename a corrupt database (and its WAL files) so a fresh one can be created in its place."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                with contextlib.suppress(OSError):
                    src.rename(src.with_name(f"{src.name}.corrupt-{stamp}-{os.getpid()}"))
        log.warning("result cache %s was unusable (%s): moved aside, starting an empty cache", self.path, error)

    def _run(self, sql: str, params: tuple = (), *, write: bool = False) -> Any:
        """Run one statement: its first row, or None."""

        def work(conn: sqlite3.Connection) -> Any:
            cur = conn.execute(sql, params)
            return None if write else cur.fetchone()

        return self._db(work)

    def _db(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``work`` on the connection; a database that turns out corrupt is replaced and ``work`` retried."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    return work(self._conn)
                except sqlite3.DatabaseError as e:
                    if not _corrupt(e) or attempt == 2:
                        log.warning("result cache %s: %s; skipped, the cache is kept", self.path, _why(e))
                        return None
                    self._recover(e)
        return None

    def _recover(self, error: Exception) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._move_aside(error)
        self._conn = self._open()


class _Foreign(sqlite3.DatabaseError):
    """A database this version cannot use (another schema version): replaced like a corrupt one."""


def _corrupt(error: sqlite3.DatabaseError) -> bool:
    """Only a damaged or foreign file is replaced; a full disk, a lock or a read-only file is not damage."""
    name = getattr(error, "sqlite_errorname", None) or ""
    return isinstance(error, _Foreign) or name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def _why(error: Exception) -> str:
    """A failure in words a person can act on: a full disk says so."""
    name = getattr(error, "sqlite_errorname", None)
    full = (name or "").startswith("SQLITE_FULL") or getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
    detail = f"{error} ({name})" if name else str(error)
    return f"the disk is full: {detail}" if full else detail


def make_private(path: Path) -> None:
    """Make ``path``'s folder 0700 and the file (and its WAL files) 0600, creating them so; raise OSError for a
    folder of another user or a file that is a symlink (someone else could read or redirect the results). The
    folders it creates above are 0700 too: the symbol index (``<cache dir>/index/``) made first once left the
    cache folder 0755 for a moment, and the next process to open the cache said so on stderr."""
    folder = path.parent
    for above in reversed(list(itertools.takewhile(lambda p: not p.exists(), folder.parents))):
        above.mkdir(exist_ok=True, mode=0o700)
    folder.mkdir(exist_ok=True, mode=0o700)  # FileExistsError where a file has its name
    _owned_and_private(folder, folder.stat(), 0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        _owned_and_private(path, os.fstat(fd), 0o600, fd)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):  # sqlite creates them with the database's mode; older ones may be looser
        with contextlib.suppress(FileNotFoundError):
            side = Path(f"{path}{suffix}")
            _owned_and_private(side, side.lstat(), 0o600)


def _owned_and_private(path: Path, st: os.stat_result, mode: int, fd: int | None = None) -> None:
    if st.st_uid != os.geteuid():
        raise OSError(errno.EPERM, f"{path} belongs to another user (uid {st.st_uid})")
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, f"{path} is a symbolic link")
    if stat.S_IMODE(st.st_mode) & ~mode:
        if fd is None:
            path.chmod(mode)
        else:
            os.fchmod(fd, mode)
        log.info("result cache: %s was mode %o, now %o", path, stat.S_IMODE(st.st_mode), mode)
