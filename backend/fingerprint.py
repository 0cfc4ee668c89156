"""Which checkpoint is served, as one hash: what the editors' result cache and the daemon's store are keyed by.

A directory name says nothing about the weights behind it (a re-pruned build copied over the old one, a
240E build under the 451E name), and neither do the weight files' names and sizes: a retrained or
re-quantised build of the same shape (two ``make-tiny`` seeds) has the same ones, and would inherit every
cached result, "0 findings" included. So the fingerprint covers what decides the model's answers: the
configuration, the weights index, the tokenizer and chat-template files (the release's renderer is Python
code in the checkpoint) by content, and every weight file by its size and the content of sampled byte
ranges: the safetensors header (every tensor's name, type, shape and offsets), the first and the last
64 KiB, and 16 ranges of 64 KiB spread evenly between them (a file smaller than that is read whole).

Reading those is ~1.2 MiB per weight file, not the ~0.75 TB of the weights, and even that is done once: each
file's sampled hash is cached beside the checkpoint (``.k3-fingerprint.json``, hidden, so not a part of it)
or, when the checkpoint folder is not ours to write, in the user's cache directory, and used again while
the file's size, mtime and inode change time are the same. A change to the weights outside the sampled
ranges that keeps their size is not seen (docs/security.md says so): the fingerprint tells builds apart, it
does not prove the weights.

No mlx here: comparing the checkpoints of two ranks (or two Macs) needs nothing but the files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path

import platformdirs

# Weight files count by size and sampled content; the small files that shape the model's behaviour by content.
WEIGHT_SUFFIXES = frozenset({".safetensors", ".npz", ".gguf", ".bin", ".pt", ".pth"})
CONTENT_SUFFIXES = frozenset({".json", ".jinja", ".py", ".model", ".tiktoken", ".txt"})
MAX_CONTENT_BYTES = 256 * 1024 * 1024  # a "metadata" file larger than this is sampled like a weight file
SAMPLE_BYTES = 64 * 1024
SAMPLES = 16  # evenly spaced ranges between the head and the tail
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors refuses larger headers itself
CACHE_NAME = ".k3-fingerprint.json"
_VERSION = b"k3-checkpoint-fingerprint-v2\0"
_CACHE_VERSION = 1


class FingerprintError(ValueError):
    """The directory is not a checkpoint that can be fingerprinted (missing, unreadable, no config)."""


def checkpoint_fingerprint(path: str | os.PathLike[str]) -> str:
    """A hex sha256 over the checkpoint directory's config, index, tokenizer files and sampled weight files.

    Top-level files only (checkpoints are flat); hidden files and anything else (README, LICENSE, images)
    do not count. Raises FingerprintError when ``path`` holds no ``config.json``.
    """
    h = hashlib.sha256(_VERSION)
    for name, part in checkpoint_parts(path).items():
        h.update(f"{name}\0{part}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def checkpoint_parts(path: str | os.PathLike[str]) -> dict[str, str]:
    """What the fingerprint covers, file by file in name order: a content hash, or ``size=N sampled=HASH``.

    Two ranks' parts say which files differ when their fingerprints do (`doctor`).
    """
    root = Path(path)
    try:
        files = sorted((f for f in root.iterdir() if f.is_file() and not f.name.startswith(".")), key=lambda f: f.name)
    except OSError as exc:
        raise FingerprintError(f"cannot list checkpoint {root}: {exc.strerror or exc}") from exc
    if not any(f.name == "config.json" for f in files):
        raise FingerprintError(f"{root} holds no config.json: not a checkpoint directory")
    cache = SampleCache(root)
    parts: dict[str, str] = {}
    for f in files:
        suffix = f.suffix.lower()
        if suffix not in WEIGHT_SUFFIXES and suffix not in CONTENT_SUFFIXES:
            continue
        try:
            st = f.stat()
            if suffix in CONTENT_SUFFIXES and st.st_size <= MAX_CONTENT_BYTES:
                parts[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
            else:
                parts[f.name] = f"size={st.st_size} sampled={cache.digest(f, st)}"
        except OSError as exc:
            raise FingerprintError(f"cannot read {f}: {exc.strerror or exc}") from exc
    cache.save()
    return parts


def sampled_ranges(size: int) -> list[tuple[int, int]]:
    """(offset, length) of the byte ranges a file of ``size`` bytes is hashed by: all of it when it is small,
    else its head, SAMPLES evenly spaced ranges and its tail."""
    if size <= (SAMPLES + 2) * SAMPLE_BYTES:
        return [(0, size)]
    last = size - SAMPLE_BYTES
    return [(last * i // (SAMPLES + 1), SAMPLE_BYTES) for i in range(SAMPLES + 2)]


def sample_digest(path: Path, size: int) -> str:
    """The sha256 of a weight file's sampled ranges (and of its safetensors header, read whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        if path.suffix.lower() == ".safetensors" and size >= 8:
            (length,) = struct.unpack("<Q", os.pread(fd, 8, 0))
            h.update(b"header\0" + os.pread(fd, min(length, MAX_HEADER_BYTES, size - 8), 8))
        for offset, length in sampled_ranges(size):
            h.update(f"{offset}+{length}\0".encode() + os.pread(fd, length, offset))
    return h.hexdigest()


class SampleCache:
    """Sampled hashes of one checkpoint's weight files, kept while a file's size, mtime and ctime stay the same.

    Read from beside the checkpoint and from the user's cache directory; written beside it, or (a folder
    we may not write) to the user's cache directory, private to the user. A cache file that cannot be read
    or parsed is ignored; one that cannot be written costs only the next start its reads.
    """

    def __init__(self, root: Path):
        self._places = [root / CACHE_NAME, _user_cache(root)]
        self._files: dict[str, dict] = {}
        for place in reversed(self._places):  # beside the checkpoint wins
            self._files |= _read_cache(place)
        self._changed = False

    def digest(self, path: Path, st: os.stat_result) -> str:
        stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
        known = self._files.get(path.name)
        if known is not None and all(known.get(k) == v for k, v in stamp.items()) and "digest" in known:
            return str(known["digest"])
        digest = sample_digest(path, st.st_size)
        self._files[path.name] = stamp | {"digest": digest}
        self._changed = True
        return digest

    def save(self) -> None:
        if not self._changed:
            return
        data = json.dumps({"version": _CACHE_VERSION, "files": self._files}, sort_keys=True).encode()
        for place in self._places:
            with contextlib.suppress(OSError):
                if place != self._places[0]:
                    place.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=place.name, suffix=".tmp", dir=place.parent)  # 0600
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    os.replace(tmp, place)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
                return


def _user_cache(root: Path) -> Path:
    """Where a checkpoint's sampled hashes go when its folder is not ours to write: named by its real path."""
    key = hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:32]
    return Path(platformdirs.user_cache_dir("k3-backend")) / "fingerprints" / f"{key}.json"


def _read_cache(place: Path) -> dict[str, dict]:
    try:
        data = json.loads(place.read_bytes())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("version") == _CACHE_VERSION else None
    if not isinstance(files, dict):
        return {}
    return {name: entry for name, entry in files.items() if isinstance(entry, dict)}
