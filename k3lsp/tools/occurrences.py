"""Which files hold an identifier: the occurrence index behind ``find_references`` and identifier ``grep``.

ripgrep reads the whole tree for every search (0.7–3.6 s a symbol on Linux, issue 44); the index instead names
the few files that hold the word, and only those are read. It must stay small (Linux: 17 M file-word pairs,
3 M distinct words in 46 k files), so it keeps no words and no positions, only which files hold a word's hash:

- files are numbered (``files.id`` of the symbol index) and cut into chunks of ``CHUNK`` consecutive ids; a
  chunk is the unit of (re)building, so a changed file costs the re-reading of its chunk, never a full build;
- a word's 64-bit BLAKE2 hash picks one of ``BUCKETS`` buckets (its low bits) and is kept as 32 more bits;
- one row per (chunk, bucket): the words' 32-bit hashes, sorted, then where each word's file list ends, then the
  lists, each file as its 16-bit place in the chunk (``array`` in little-endian order).

A lookup reads one bucket's row in each chunk (one seek each), finds the hash by bisection and decodes one list
per chunk. Two words that share 44 bits of hash (about one pair among Linux's words) only make a file be read
that does not hold the word: the reader checks every line it shows with a whole-word search.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import sqlite3
import sys
from array import array
from collections.abc import Iterable

CHUNK = 512  # files per chunk (a place in it fits 16 bits)
BUCKETS = 4096
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_LITTLE = sys.byteorder == "little"

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS postings (chunk INTEGER NOT NULL, bucket INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (chunk, bucket)) WITHOUT ROWID",
)


def words(data: bytes) -> set[bytes]:
    """The distinct identifiers (C's spelling) in a file's bytes."""
    return set(_WORD.findall(data))


def _hash(word: bytes) -> tuple[int, int]:
    """(bucket, the 32 bits kept) of a word."""
    value = int.from_bytes(hashlib.blake2b(word, digest_size=8).digest(), "little")
    return value % BUCKETS, (value // BUCKETS) & 0xFFFFFFFF


def _array(code: str, data: bytes = b"") -> array:
    out = array(code, data)
    if not _LITTLE:
        out.byteswap()
    return out


def _bytes(values: array) -> bytes:
    if not _LITTLE:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def encode_chunk(files: Iterable[tuple[int, set[bytes]]]) -> dict[int, bytes]:
    """The rows of one chunk: ``files`` are (place in the chunk, its words), in any order."""
    buckets: dict[int, dict[int, list[int]]] = {}
    for place, found in files:
        for word in found:
            bucket, kept = _hash(word)
            buckets.setdefault(bucket, {}).setdefault(kept, []).append(place)
    rows = {}
    for bucket, lists in buckets.items():
        hashes = sorted(lists)
        ends, places = _array("I"), _array("H")
        for kept in hashes:
            places.extend(sorted(set(lists[kept])))
            ends.append(len(places))
        rows[bucket] = len(hashes).to_bytes(4, "little") + _bytes(array("I", hashes)) + _bytes(ends) + _bytes(places)
    return rows


def _decode(data: bytes, kept: int) -> array:
    """The places of the word whose kept hash is ``kept`` in one row (empty when it is not there)."""
    count = int.from_bytes(data[:4], "little")
    hashes = _array("I", data[4 : 4 + 4 * count])
    i = bisect.bisect_left(hashes, kept)
    if i == count or hashes[i] != kept:
        return _array("H")
    ends = _array("I", data[4 + 4 * count : 4 + 8 * count])
    start = ends[i - 1] if i else 0
    base = 4 + 8 * count
    return _array("H", data[base + 2 * start : base + 2 * ends[i]])


def write_chunk(conn: sqlite3.Connection, chunk: int, files: Iterable[tuple[int, set[bytes]]]) -> None:
    """Replace one chunk's rows (``files``: (file id, its words), every id in the chunk). In the caller's
    transaction."""
    rows = encode_chunk((file_id - chunk * CHUNK, found) for file_id, found in files)
    conn.execute("DELETE FROM postings WHERE chunk=?", (chunk,))
    conn.executemany("INSERT INTO postings VALUES (?, ?, ?)", ((chunk, b, data) for b, data in rows.items()))


def files_with(conn: sqlite3.Connection, word: str) -> list[int]:
    """The ids of the files that hold ``word`` (and, rarely, of files holding a word of the same hash)."""
    bucket, kept = _hash(word.encode())
    found: list[int] = []
    (last,) = conn.execute("SELECT max(chunk) FROM postings").fetchone()
    chunks = json.dumps(list(range((last or 0) + 1)))
    sql = "SELECT chunk, data FROM postings WHERE chunk IN (SELECT value FROM json_each(?)) AND bucket=? ORDER BY chunk"
    for chunk, data in conn.execute(sql, (chunks, bucket)):
        base = chunk * CHUNK
        found.extend(base + place for place in _decode(data, kept))
    return found


def lines_with(data: bytes, word: str) -> list[tuple[int, str]]:
    """The lines of a file's bytes that hold ``word`` as a whole word (ripgrep's ``--word-regexp``): (1-based
    number, text)."""
    pattern = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(word.encode()) + rb"(?![A-Za-z0-9_])")
    out: list[tuple[int, str]] = []
    line, counted, next_line = 1, 0, 0
    for match in pattern.finditer(data):
        start = match.start()
        if start < next_line:  # a second hit on a line already taken
            continue
        line += data.count(b"\n", counted, start)
        counted = start
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        out.append((line, data[data.rfind(b"\n", 0, start) + 1 : end].decode("utf-8", "replace")))
        next_line = end + 1
    return out
