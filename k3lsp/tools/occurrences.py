"""Which files hold an identifier: the occurrence index behind ``find_references`` and identifier ``grep``.

ripgrep reads the whole tree for every search (0.7–3.6 s a symbol on Linux, issue 44); the index instead names
the few files that hold the word, and only those are read. It must stay small (Linux: 17 M file-word pairs,
3 M distinct words in 46 k files), so it keeps no words and no positions, only which files hold a word's hash:

- files are numbered (``files.id`` of the symbol index) and cut into chunks of ``CHUNK`` consecutive ids; a
  chunk is the unit of (re)building, so a changed file costs the re-reading of its chunk, never a full build;
- a word's 64-bit BLAKE2 hash picks one of ``BUCKETS`` buckets (its low bits) and is kept as 32 more bits;
- one blob per chunk (``encode_chunk``), cut into the buckets' sections: the words' 32-bit hashes, sorted, how
  many files each is in, then each one's files as 16-bit places in the chunk, or as a bitmap for a common word.
  (One sqlite row per bucket and chunk took over 110 MiB on Linux: a row too big for its B-tree page spills
  into whole pages of its own.)

A lookup reads one bucket's section of each chunk's blob (``blobopen``: a few hundred bytes each), finds the hash
by bisection and decodes one list per chunk. Two words that share 44 bits of hash (about one pair among Linux's
words) only make a file be read that does not hold the word: the reader checks every line it shows with a
whole-word search.
"""

from __future__ import annotations

import bisect
import hashlib
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
_HEADER = 4 * (BUCKETS + 1)

SCHEMA = ("CREATE TABLE IF NOT EXISTS postings (chunk INTEGER PRIMARY KEY, data BLOB NOT NULL)",)


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


def encode_chunk(files: Iterable[tuple[int, set[bytes]]]) -> bytes:
    """One chunk's blob: ``files`` are (place in the chunk, its words), in any order. The blob is BUCKETS + 1
    offsets (32-bit), then one section a bucket: its word count n, n hashes (32-bit, sorted), n file counts
    (16-bit), then each word's file list (``_size``)."""
    buckets: list[dict[int, list[int]]] = [{} for _ in range(BUCKETS)]
    for place, found in files:
        for word in found:
            bucket, kept = _hash(word)
            buckets[bucket].setdefault(kept, []).append(place)
    offsets, sections, at = _array("I"), [], _HEADER
    for lists in buckets:
        offsets.append(at)
        hashes = sorted(lists)
        counts = array("H", (len(lists[kept]) for kept in hashes))
        parts = [len(hashes).to_bytes(4, "little"), _bytes(array("I", hashes)), _bytes(counts)]
        for kept in hashes:
            places = sorted(lists[kept])
            if 2 * len(places) > BITMAP:
                parts.append(sum(1 << p for p in places).to_bytes(BITMAP, "little"))
            else:
                parts.append(_bytes(array("H", places)))
        section = b"".join(parts)
        sections.append(section)
        at += len(section)
    offsets.append(at)
    return _bytes(offsets) + b"".join(sections)


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
    """Replace one chunk's blob (``files``: (file id, its words), every id in the chunk). In the caller's
    transaction."""
    data = encode_chunk((file_id - chunk * CHUNK, found) for file_id, found in files)
    conn.execute("INSERT OR REPLACE INTO postings VALUES (?, ?)", (chunk, data))


def files_with(conn: sqlite3.Connection, word: str) -> list[int]:
    """The ids of the files that hold ``word`` (and, rarely, of files holding a word of the same hash)."""
    bucket, kept = _hash(word.encode())
    found: list[int] = []
    for (chunk,) in conn.execute("SELECT chunk FROM postings ORDER BY chunk").fetchall():
        with conn.blobopen("postings", "data", chunk, readonly=True) as blob:
            blob.seek(4 * bucket)
            start, end = _array("I", blob.read(8))
            blob.seek(start)
            section = blob.read(end - start)
        found.extend(chunk * CHUNK + place for place in _decode(section, kept))
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
