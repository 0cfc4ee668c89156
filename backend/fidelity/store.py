"""The BASE file: what the reference model predicted on every scored token, stored once, compared often.

Like llama.cpp's `--kl-divergence-base`, the reference runs once and a candidate is compared later on
the identical tokens, without the reference in memory. The full distribution over a 163,840-token
vocabulary is 320 KB per token in float16, 8 GB for the card's 24 x 1024 tokens, so a BASE keeps per
predicted token the reference's top-k log-probabilities (float32) with their token ids, the log of
the remaining mass, the log-probability of the actual next token, and the token's span: 8k + 9 bytes,
about 0.5 KB at k = 64.

Error bound. With S the reference's top-k, r = P(not S) and Q_rest = Q(not S), compare computes

    KL_S = sum_{v in S} P(v) log(P(v)/Q(v)) + r log(r / Q_rest)

which is the exact KL divergence of the two distributions with the tail merged into one outcome. So
KL_S <= KL(P||Q) (never an overestimate), and the missing part is exactly r * KL(P_tail || Q_tail) of
the renormalised tails. Every tail token has P(v) <= P_k (the k-th stored probability), so

    0 <= KL(P||Q) - KL_S <= r * (min(log(P_k / r), 0) - log(min_{v not in S} Q(v) / Q_rest))

which compare evaluates per token against the candidate's full distribution and reports as
`tail_bound`. Top-1 agreement and perplexities are exact: the reference's top token is stored and its
log-probability of the actual next token is stored whether or not that token is in S.

Layout (little endian): MAGIC, u32 format version, u64 header length, UTF-8 JSON header, then per
window its token ids (int32), its generation prompt (int32) and one record per predicted token
(`record_dtype`), then TRAILER and the SHA-256 of everything before it. The file is written to
`<name>.partial` and renamed when complete, so a BASE that exists was recorded to the end.
"""

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

FORMAT_VERSION = 1
MAGIC = b"K3FBASE\0"
TRAILER = b"K3FBEND\0"
_PREFIX = len(MAGIC) + 4 + 8
_TAIL = len(TRAILER) + 32
_BLOCK = 1 << 20


class BaseError(ValueError):
    """A BASE that cannot be used: corrupt, incomplete, another format, or not matching the candidate."""


def record_dtype(top_k: int) -> np.dtype:
    """One predicted token: span, log P(actual next token), log P(rest), top-k ids and log-probs (descending)."""
    return np.dtype(
        [("label", "u1"), ("target", "<f4"), ("rest", "<f4"), ("ids", "<i4", (top_k,)), ("logprobs", "<f4", (top_k,))]
    )


def tokenizer_fingerprint(tokenizer) -> str:
    """SHA-256 of the vocabulary (token -> id): two tokenizers agree on every id iff this matches."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def ids_digest(ids) -> str:
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()


@dataclass
class WindowEntry:
    source: str
    corpus: str
    tokens: int  # ids in the window; tokens - 1 records follow them
    prompt: int  # generation-prompt ids stored after the window's ids
    sha256: str  # of the window's ids, as int32


@dataclass
class Header:
    tokenizer: str  # tokenizer_fingerprint of the reference
    vocab_size: int  # width of the reference's output distribution
    window: int
    top_k: int
    chunk: int  # tokens per teacher-forced forward pass; compare uses the same to match numerics
    model: dict  # where the reference came from: path and config hash, for the report
    spans: list[str]
    windows: list[WindowEntry] = field(default_factory=list)
    version: int = FORMAT_VERSION

    def sizes(self, i: int) -> tuple[int, int]:
        """(bytes of window i's ids + prompt, bytes of its records)."""
        w = self.windows[i]
        return 4 * (w.tokens + w.prompt), (w.tokens - 1) * record_dtype(self.top_k).itemsize


class BaseWriter:
    """Streams a BASE to disk window by window; `close()` seals it, leaving the file unsealed is harmless."""

    def __init__(self, path: str | Path, header: Header):
        self.path = Path(path)
        self.header = header
        self._partial = self.path.with_name(self.path.name + ".partial")
        self._file = self._partial.open("wb")
        self._hash = hashlib.sha256()
        text = json.dumps(asdict(header)).encode()
        self._write(MAGIC + np.uint32(FORMAT_VERSION).tobytes() + np.uint64(len(text)).tobytes() + text)
        self._dtype = record_dtype(header.top_k)
        self._window = -1
        self._left = 0

    def _write(self, data: bytes) -> None:
        self._hash.update(data)
        self._file.write(data)

    def begin(self, ids: list[int], prompt: list[int]) -> None:
        """Start the next window of the header: its ids and generation prompt."""
        if self._left:
            raise RuntimeError(f"window {self._window} is missing {self._left} records")
        self._window += 1
        entry = self.header.windows[self._window]
        if ids_digest(ids) != entry.sha256 or len(prompt) != entry.prompt:
            raise RuntimeError(f"window {self._window} differs from the header")
        self._write(np.asarray(ids, "<i4").tobytes() + np.asarray(prompt, "<i4").tobytes())
        self._left = entry.tokens - 1

    def add(self, records: np.ndarray) -> None:
        """Append records of the current window, in token order."""
        if records.dtype != self._dtype or len(records) > self._left:
            raise RuntimeError("records do not fit the current window")
        self._write(records.tobytes())
        self._left -= len(records)

    def close(self) -> Path:
        if self._left or self._window != len(self.header.windows) - 1:
            raise RuntimeError("the BASE is closed before every window was recorded")
        self._file.write(TRAILER + self._hash.digest())
        self._file.close()
        os.replace(self._partial, self.path)
        return self.path

    def abort(self) -> None:
        self._file.close()
        self._partial.unlink(missing_ok=True)


class Base:
    """A verified BASE: the header, and each window's ids, prompt and records read on demand (memory-mapped)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.header, self._starts = _read_header(self.path)
        _verify_digest(self.path)
        for i, entry in enumerate(self.header.windows):
            if ids_digest(self.ids(i)) != entry.sha256:
                raise BaseError(f"{self.path}: window {i} ({entry.source}) does not match its recorded hash")

    def _ints(self, offset: int, count: int) -> np.ndarray:
        return np.fromfile(self.path, dtype="<i4", count=count, offset=offset)

    def ids(self, i: int) -> list[int]:
        return self._ints(self._starts[i], self.header.windows[i].tokens).tolist()

    def prompt(self, i: int) -> list[int]:
        entry = self.header.windows[i]
        return self._ints(self._starts[i] + 4 * entry.tokens, entry.prompt).tolist()

    def records(self, i: int) -> np.ndarray:
        """Window i's records, memory-mapped: slicing reads only what is used."""
        ids_bytes, _ = self.header.sizes(i)
        return np.memmap(
            self.path,
            dtype=record_dtype(self.header.top_k),
            mode="r",
            offset=self._starts[i] + ids_bytes,
            shape=(self.header.windows[i].tokens - 1,),
        )


def _read_header(path: Path) -> tuple[Header, list[int]]:
    if not path.is_file():
        partial = path.with_name(path.name + ".partial")
        hint = " (a .partial file exists: that recording did not finish)" if partial.exists() else ""
        raise BaseError(f"{path}: no such BASE file{hint}")
    with path.open("rb") as f:
        prefix = f.read(_PREFIX)
        if prefix[: len(MAGIC)] != MAGIC:
            raise BaseError(f"{path}: not a fidelity BASE file (see docs/fidelity.md)")
        if len(prefix) < _PREFIX:
            raise BaseError(f"{path}: truncated BASE file")
        version = int(np.frombuffer(prefix, "<u4", 1, len(MAGIC))[0])
        if version != FORMAT_VERSION:
            raise BaseError(
                f"{path}: BASE format version {version}; this build reads version {FORMAT_VERSION}, "
                "re-record it with `k3-backend fidelity record`"
            )
        length = int(np.frombuffer(prefix, "<u8", 1, len(MAGIC) + 4)[0])
        text = f.read(length) if length <= path.stat().st_size else b""
    try:
        raw = json.loads(text)
        header = Header(**{**raw, "windows": [WindowEntry(**w) for w in raw["windows"]]})
        _check_header(header)
    except (ValueError, TypeError, KeyError) as e:
        raise BaseError(f"{path}: corrupt BASE header ({e})") from None
    starts, offset = [], _PREFIX + length
    for i in range(len(header.windows)):
        starts.append(offset)
        offset += sum(header.sizes(i))
    if path.stat().st_size != offset + _TAIL:
        raise BaseError(f"{path}: corrupt BASE: {path.stat().st_size} bytes, the header describes {offset + _TAIL}")
    return header, starts


def _check_header(h: Header) -> None:
    numbers = {"vocab_size": h.vocab_size, "window": h.window, "top_k": h.top_k, "chunk": h.chunk}
    for name, value in numbers.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer")
    if h.top_k > h.vocab_size or not h.windows:
        raise ValueError("top_k exceeds the vocabulary, or there are no windows")
    for w in h.windows:
        sizes_ok = isinstance(w.tokens, int) and isinstance(w.prompt, int)
        if not (sizes_ok and 2 <= w.tokens <= h.window and w.prompt >= 0):
            raise ValueError(f"window {w.source!r} has an impossible size")


def _verify_digest(path: Path) -> None:
    digest = hashlib.sha256()
    size = path.stat().st_size - _TAIL
    with path.open("rb") as f:
        left = size
        while left:
            block = f.read(min(_BLOCK, left))
            digest.update(block)
            left -= len(block)
        trailer = f.read(_TAIL)
    if trailer[: len(TRAILER)] != TRAILER or trailer[len(TRAILER) :] != digest.digest():
        raise BaseError(f"{path}: corrupt BASE: checksum mismatch (the file changed after it was recorded)")
