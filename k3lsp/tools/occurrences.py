"""Which files hold an identifier: the occurrence index behind ``find_references`` and identifier ``grep``.

ripgrep reads the whole tree for every search (0.7–3.6 s a symbol on Linux, issue 44); the index instead names
the few files that hold the word, and only those are read. It must stay small (Linux: 17 M file-word pairs,
3 M distinct words in 46 k files), so it keeps no words and no positions, only which files hold a word's hash:

- files are numbered (``files.id`` of the symbol index) and cut into chunks of ``CHUNK`` consecutive ids; a
  chunk is the unit of (re)building, so a changed file costs the re-reading of its chunk, never a full build;
- a word's 64-bit BLAKE2 hash picks one of ``BUCKETS`` buckets (its low bits) and is kept as 32 more bits;
- one row per bucket of a chunk (``encode_chunk``): the words' 32-bit hashes, sorted, how many files each is
  in, then each one's files as 16-bit places in the chunk, or as a bitmap for a common word. (Chunks of 512
  files with 32-bit ends and no bitmaps took over 110 MiB on Linux; one blob per chunk, read with
  ``blobopen``, cost a walk of its overflow pages on every lookup.)

A lookup reads one row of each chunk (a few hundred bytes), finds the hash by bisection and decodes one list
per chunk. Two words that share 44 bits of hash (about one pair among Linux's
words) only make a file be read that does not hold the word: the reader checks every line it shows with a
whole-word search.
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

CHUNK = 2048  # files per chunk (a place in it fits 16 bits)
BUCKETS = 4096
BITMAP = CHUNK // 8  # a word in more than BITMAP // 2 files of a chunk is kept as a bitmap of its files
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_LITTLE = sys.byteorder == "little"
_INNER = frozenset(bytes([c]) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")

# one row a bucket of a chunk (id: chunk * BUCKETS + bucket), a few hundred bytes: a row stays in its B-tree page
SCHEMA = ("CREATE TABLE IF NOT EXISTS postings (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",)


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


def _size(count: int) -> int:
    """Bytes of a file list of ``count`` files: 16-bit places, or a bitmap once that is smaller."""
    return BITMAP if 2 * count > BITMAP else 2 * count


def encode_chunk(files: Iterable[tuple[int, set[bytes]]]) -> dict[int, bytes]:
    """One chunk's sections by bucket: ``files`` are (place in the chunk, its words), in any order. A section
    is its word count n, n hashes (32-bit, sorted), n file counts (16-bit), then each word's file list
    (``_size``)."""
    buckets: dict[int, dict[int, list[int]]] = {}
    hashed: dict[bytes, list[int]] = {}  # a word's file list, found by the word: each distinct word hashed once
    for place, found in files:
        for word in found:
            places = hashed.get(word)
            if places is None:
                bucket, kept = _hash(word)
                places = hashed[word] = buckets.setdefault(bucket, {}).setdefault(kept, [])
            places.append(place)
    sections = {}
    for bucket, lists in buckets.items():
        hashes = sorted(lists)
        counts = array("H", (len(lists[kept]) for kept in hashes))
        parts = [len(hashes).to_bytes(4, "little"), _bytes(array("I", hashes)), _bytes(counts)]
        for kept in hashes:
            places = sorted(lists[kept])
            if 2 * len(places) > BITMAP:
                parts.append(sum(1 << p for p in places).to_bytes(BITMAP, "little"))
            else:
                parts.append(_bytes(array("H", places)))
        sections[bucket] = b"".join(parts)
    return sections


def _decode(section: bytes, kept: int) -> list[int]:
    """The places of the word whose kept hash is ``kept`` in one bucket's section (none when it is not there)."""
    count = int.from_bytes(section[:4], "little")
    hashes = _array("I", section[4 : 4 + 4 * count])
    i = bisect.bisect_left(hashes, kept)
    if i == count or hashes[i] != kept:
        return []
    counts = _array("H", section[4 + 4 * count : 4 + 6 * count])
    start = 4 + 6 * count + sum(_size(n) for n in counts[:i])
    data = section[start : start + _size(counts[i])]
    if len(data) == BITMAP and 2 * counts[i] > BITMAP:
        bits = int.from_bytes(data, "little")
        return [p for p in range(CHUNK) if bits >> p & 1]
    return list(_array("H", data))


def write_chunk(conn: sqlite3.Connection, chunk: int, files: Iterable[tuple[int, set[bytes]]]) -> None:
    """Replace one chunk's rows (``files``: (file id, its words), every id in the chunk). In the caller's
    transaction."""
    sections = encode_chunk((file_id - chunk * CHUNK, found) for file_id, found in files)
    first = chunk * BUCKETS
    conn.execute("DELETE FROM postings WHERE id BETWEEN ? AND ?", (first, first + BUCKETS - 1))
    conn.executemany("INSERT INTO postings VALUES (?, ?)", ((first + b, data) for b, data in sections.items()))


def files_with(conn: sqlite3.Connection, word: str) -> list[int]:
    """The ids of the files that hold ``word`` (and, rarely, of files holding a word of the same hash)."""
    bucket, kept = _hash(word.encode())
    (last,) = conn.execute("SELECT max(id) FROM postings").fetchone()
    rows = json.dumps([chunk * BUCKETS + bucket for chunk in range((last or 0) // BUCKETS + 1)])
    found: list[int] = []
    sql = "SELECT id, data FROM postings WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id"
    for row, section in conn.execute(sql, (rows,)):
        base = row // BUCKETS * CHUNK
        found.extend(base + place for place in _decode(section, kept))
    return found


def lines_with(data: bytes, word: str) -> list[tuple[int, str]]:
    """The lines of a file's bytes that hold ``word`` as a whole word (ripgrep's ``--word-regexp``): (1-based
    number, text). The word is looked for with ``bytes.find`` (a regex that begins with a lookbehind gets no
    fast literal scan)."""
    needle = word.encode()
    out: list[tuple[int, str]] = []
    line, counted, at = 1, 0, data.find(needle)
    while at >= 0:
        after = at + len(needle)
        whole = (at == 0 or data[at - 1 : at] not in _INNER) and data[after : after + 1] not in _INNER
        if not whole:
            at = data.find(needle, at + 1)
            continue
        line += data.count(b"\n", counted, at)
        counted = at
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        out.append((line, data[data.rfind(b"\n", 0, at) + 1 : end].decode("utf-8", "replace")))
        at = data.find(needle, end + 1) if end < len(data) else -1
    return out
