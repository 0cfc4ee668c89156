"""The splits of the files an editor opened and of those any audit found something in, kept across restarts: a file
opened with its text unchanged shows its cached findings without waiting for the splitter.

Splitting waits for the splitter's process (half a second to start) and a 0.9 MB kernel file takes as long again
in it, so an editor restarted on a kernel tree showed nothing for a second on every large file it reopened, though
the result cache held every finding of its units. A split depends only on the text, the kernel macro table and
the splitter's own code, so it is kept under a digest of the three: an unchanged text is not split again, here or
in any later session. Kept are the files the editor opened and those any front end's audit (the workspace audit,
``k3lsp audit``, ``review``, ``eval``: ``k3lsp.core.service``) found something to show in (all of its files would
fill the store), at most ``KEPT``, the least recently used going first.

They live in ``splits.sqlite3`` beside the result cache, in the same private folder (``k3lsp.wire.cache``): the
units are the user's code. The rows are JSON (never pickle: nothing read back can run code), and a row that does
not read back as units is a miss. As with the result cache, a store that cannot be used is a reason to split,
never to fail: the problem is logged once and the store is off for the session.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sqlite3
import threading
import time
import zlib
from dataclasses import asdict, fields
from pathlib import Path

from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit
from k3lsp.wire.cache import BUSY_TIMEOUT_S, make_private

log = logging.getLogger(__name__)

FILE_NAME = "splits.sqlite3"
KEPT = 256  # files: the ones a person has open, and those of the last days
UNITS = Path(__file__).resolve().parents[1] / "units"
_FIELDS = tuple(f.name for f in fields(Unit))


@functools.cache
def splitter_digest() -> str:
    """The splitter's own code (the units package's sources): a changed splitter splits every text again."""
    h = hashlib.sha256()
    for source in sorted(UNITS.glob("*.py")):
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    return h.hexdigest()


def digest(text: str, macros: Macros) -> str:
    """The address of a split: the text, the macro table and the splitter."""
    h = hashlib.sha256(splitter_digest().encode())
    h.update(repr((macros.loops, macros.attributes, macros.statements)).encode())
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def encode(units: tuple[Unit, ...]) -> bytes:
    """The units as compressed JSON; the file context all of them share (up to 32 kB) is written once."""
    shared = {u.file_context for u in units}
    file_context = shared.pop() if len(shared) == 1 else None
    rows = [asdict(u) | ({"file_context": None} if file_context is not None else {}) for u in units]
    return zlib.compress(json.dumps({"file_context": file_context, "units": rows}).encode(), 1)


def decode(blob: bytes) -> tuple[Unit, ...]:
    """The units written by :func:`encode`; ValueError (or TypeError, KeyError) for anything else."""
    data = json.loads(zlib.decompress(blob))
    shared = data["file_context"]
    out = []
    for row in data["units"]:
        if set(row) != set(_FIELDS):
            raise ValueError("not a unit")
        if shared is not None:
            row["file_context"] = shared
        unit = Unit(**row)
        if not all(isinstance(getattr(unit, f), int if f.endswith("_line") else str) for f in _FIELDS):
            raise ValueError("not a unit")
        out.append(unit)
    return tuple(out)


class SplitStore:
    """``get`` and ``put`` a text's units. Blocking (sqlite, zlib): call them off the event loop. Thread-safe."""

    def __init__(self, path: Path, kept: int = KEPT):
        self.path, self.kept = path, kept
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._off = False  # the store could not be used: the problem was logged once
        self._known: set[str] = set()  # the digests this session read or wrote: not written again
        self.hits = self.misses = 0

    @classmethod
    def beside(cls, results: Path) -> SplitStore:
        """The store in the result cache's folder."""
        return cls(results.parent / FILE_NAME)

    def get(self, text: str, macros: Macros) -> tuple[Unit, ...] | None:
        key = digest(text, macros)
        row = self._run(lambda c: c.execute("SELECT units FROM splits WHERE digest = ?", (key,)).fetchone())
        if row is None:
            self.misses += 1
            return None
        try:
            found = decode(row[0])
        except (ValueError, TypeError, KeyError, zlib.error) as exc:
            log.info("split store: a row that is not units (%s): splitting again", exc)
            self.misses += 1
            return None
        self.hits += 1
        self._run(lambda c: c.execute("UPDATE splits SET used = ? WHERE digest = ?", (time.time(), key)))
        self._known.add(key)
        return found

    def put(self, text: str, macros: Macros, units: tuple[Unit, ...]) -> None:
        """Keep a split (once per text and session: a file saved unchanged is not written again)."""
        key = digest(text, macros)
        if key in self._known:
            return
        self._known.add(key)
        blob = encode(units)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO splits VALUES (?, ?, ?)", (key, blob, time.time()))
            conn.execute(
                "DELETE FROM splits WHERE digest NOT IN (SELECT digest FROM splits ORDER BY used DESC LIMIT ?)",
                (self.kept,),
            )

        self._run(work)

    def open(self) -> None:
        """Open the file now (the language server does as it starts), not on the first file opened."""
        self._run(lambda _: None)

    def stats(self) -> dict[str, int | bool]:
        """For ``k3lsp.status``: texts found split, texts split anew, whether the store is off."""
        return {"hits": self.hits, "misses": self.misses, "off": self._off}

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(self, work):
        with self._lock:
            if self._off:
                return None
            try:
                if self._conn is None:
                    self._conn = self._open()
                with self._conn:
                    return work(self._conn)
            except (sqlite3.Error, OSError) as exc:
                log.warning("split store %s cannot be used (%s): files are split again each session", self.path, exc)
                self._off = True
                return None

    def _open(self) -> sqlite3.Connection:
        make_private(self.path)  # 0600 in a 0700 folder of ours, not a link: the units are the user's code
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # a kept split marked used must not wait for the disk (an fsync)
        conn.execute("CREATE TABLE IF NOT EXISTS splits (digest TEXT PRIMARY KEY, units BLOB NOT NULL, used REAL)")
        return conn
