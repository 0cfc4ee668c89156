"""Content-addressed audit results in sqlite, shared by the editor, `k3lsp audit` and restarts.

An audit of one unit costs seconds to minutes on the Mac pair (DESIGN.md "Performance model"); the
same unit text and context, audited by the same model with the same prompt, gives the same answer
for our purposes. So results are keyed by (unit key, result key: ``k3lsp.resultkey``, which names the
model's checkpoint, the prompt version, the thinking effort and the daemon) and kept across processes
and restarts. Only complete audits are stored (``k3lsp.auditor``). Several processes (an editor per
window, a batch audit) share one file: WAL mode and a busy timeout let them read and write concurrently.
A cache is an optimisation, never a reason to fail: a corrupt file is moved aside (logged) and a fresh
one created.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

log = logging.getLogger(__name__)

ENV_DIR = "K3LSP_CACHE_DIR"
FILE_NAME = "results.sqlite3"
SCHEMA_VERSION = 2  # 1 keyed results by model name and stored cut-short audits: dropped
BUSY_TIMEOUT_S = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    unit_key TEXT NOT NULL,
    result_key TEXT NOT NULL, -- resultkey.ResultKey.digest()
    findings TEXT NOT NULL,   -- JSON list of finding dicts (findings.Finding.to_dict)
    stats TEXT NOT NULL,      -- JSON object: the backend's `done` stats
    created REAL NOT NULL,    -- unix time
    PRIMARY KEY (unit_key, result_key)
) WITHOUT ROWID
"""


@dataclass(frozen=True)
class CachedResult:
    findings: list[dict[str, Any]]
    stats: dict[str, Any]
    created: float


def default_path() -> Path:
    """`$K3LSP_CACHE_DIR/results.sqlite3`, else the platform's user cache dir for k3lsp."""
    root = os.environ.get(ENV_DIR) or platformdirs.user_cache_dir("k3lsp")
    return Path(root) / FILE_NAME


class ResultCache:
    """The result cache. Thread-safe (one connection behind a lock); process-safe through sqlite."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn = self._open()

    # --- public API ---------------------------------------------------------------------------------------

    def get(self, unit_key: str, result_key: str) -> CachedResult | None:
        row = self._run(
            "SELECT findings, stats, created FROM results WHERE unit_key=? AND result_key=?", (unit_key, result_key)
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
        return CachedResult(findings, stats, row[2])

    def has(self, unit_key: str, result_key: str) -> bool:
        row = self._run("SELECT 1 FROM results WHERE unit_key=? AND result_key=?", (unit_key, result_key))
        return row is not None

    def put(
        self,
        unit_key: str,
        result_key: str,
        findings: list[dict[str, Any]],
        stats: dict[str, Any] | None = None,
    ) -> None:
        self._run(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
            (unit_key, result_key, json.dumps(findings), json.dumps(stats or {}), time.time()),
            write=True,
        )

    def clear(self) -> int:
        """Forget every result; returns how many there were."""
        row = self._run("SELECT COUNT(*) FROM results")
        self._run("DELETE FROM results", write=True)
        return row[0] if row else 0

    def stats(self) -> dict[str, Any]:
        row = self._run("SELECT COUNT(*), COUNT(DISTINCT result_key), MIN(created), MAX(created) FROM results")
        entries, keys, oldest, newest = row if row else (0, 0, None, None)
        try:
            size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))
        except OSError:
            size = 0
        return {
            "path": str(self.path),
            "entries": entries,
            "result_keys": keys,
            "bytes": size,
            "oldest": oldest,
            "newest": newest,
            "hits": self.hits,
            "misses": self.misses,
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
                self._move_aside(e)
                return self._connect(self.path)
        except (sqlite3.Error, OSError) as e:
            log.warning("result cache %s cannot be used (%s): caching in memory for this process", self.path, e)
            return self._connect(":memory:")

    def _connect(self, path: Path | str) -> sqlite3.Connection:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
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
                raise sqlite3.DatabaseError(f"schema version {version}, expected {SCHEMA_VERSION}")
            conn.execute(_SCHEMA)
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
        """Run one statement; a database that turns out corrupt is replaced, and the statement retried."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    cur = self._conn.execute(sql, params)
                    return None if write else cur.fetchone()
                except sqlite3.OperationalError as e:
                    if "locked" in str(e) or "busy" in str(e) or attempt == 2:
                        log.warning("result cache busy, skipped (%s)", e)
                        return None
                    self._recover(e)
                except sqlite3.DatabaseError as e:
                    if attempt == 2:
                        log.warning("result cache unusable, skipped (%s)", e)
                        return None
                    self._recover(e)
        return None

    def _recover(self, error: Exception) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._move_aside(error)
        self._conn = self._open()
