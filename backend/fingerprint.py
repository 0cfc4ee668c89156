"""Which checkpoint is served, as one hash: what the editors' result cache is keyed by.

A directory name says nothing about the weights behind it (a re-pruned build copied over the old one, a
240E build under the 451E name), so cached results must not be filed under it. The fingerprint covers
what decides the model's answers and can be read in milliseconds at every start: the configuration, the
weights index, the tokenizer and chat-template files (the release's renderer is Python code in the
checkpoint) by content, and every weight file by name and size. Hashing the weights themselves would
read ~0.75 TB; a different build changes the config, the index or a file size.

No mlx here: comparing the checkpoints of two ranks (or two Macs) needs nothing but the files.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# Weight files count by name and size; the small files that shape the model's behaviour by content.
WEIGHT_SUFFIXES = frozenset({".safetensors", ".npz", ".gguf", ".bin", ".pt", ".pth"})
CONTENT_SUFFIXES = frozenset({".json", ".jinja", ".py", ".model", ".tiktoken", ".txt"})
MAX_CONTENT_BYTES = 256 * 1024 * 1024  # a "metadata" file larger than this counts by name and size only
_VERSION = b"k3-checkpoint-fingerprint-v1\0"


class FingerprintError(ValueError):
    """The directory is not a checkpoint that can be fingerprinted (missing, unreadable, no config)."""


def checkpoint_fingerprint(path: str | os.PathLike[str]) -> str:
    """A hex sha256 over the checkpoint directory's config, index, tokenizer files and weight file sizes.

    Top-level files only (checkpoints are flat); hidden files and anything else (README, LICENSE, images)
    do not count. Raises FingerprintError when ``path`` holds no ``config.json``.
    """
    h = hashlib.sha256(_VERSION)
    for name, part in checkpoint_parts(path).items():
        h.update(f"{name}\0{part}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def checkpoint_parts(path: str | os.PathLike[str]) -> dict[str, str]:
    """What the fingerprint covers, file by file in name order: a content hash, or ``size=N`` for weights.

    Two ranks' parts say which files differ when their fingerprints do (`doctor`).
    """
    root = Path(path)
    try:
        files = sorted((f for f in root.iterdir() if f.is_file() and not f.name.startswith(".")), key=lambda f: f.name)
    except OSError as exc:
        raise FingerprintError(f"cannot list checkpoint {root}: {exc.strerror or exc}") from exc
    if not any(f.name == "config.json" for f in files):
        raise FingerprintError(f"{root} holds no config.json: not a checkpoint directory")
    parts: dict[str, str] = {}
    for f in files:
        suffix = f.suffix.lower()
        if suffix not in WEIGHT_SUFFIXES and suffix not in CONTENT_SUFFIXES:
            continue
        try:
            size = f.stat().st_size
            by_content = suffix in CONTENT_SUFFIXES and size <= MAX_CONTENT_BYTES
            parts[f.name] = hashlib.sha256(f.read_bytes()).hexdigest() if by_content else f"size={size}"
        except OSError as exc:
            raise FingerprintError(f"cannot read {f}: {exc.strerror or exc}") from exc
    return parts
