"""CurveZMQ key pairs for editors and daemons: created private, loaded with a permission check.

pyzmq's ``create_certificates`` writes the secret file with the process umask (0644 on most machines,
measured in notes/zmq-research.md), so the secret key of the machine that sees everyone's source code
would be world-readable. Here secret files are created 0600 inside a 0700 directory, and a secret file
that others can read is refused on load, the way ssh refuses a private key.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import zmq
import zmq.auth


class KeyFileError(Exception):
    """A key file is missing, malformed or unsafe; the message says which file and what to do."""


def init_keypair(directory: Path, name: str, *, force: bool = False) -> tuple[Path, Path]:
    """Create ``name.key`` (public, share it) and ``name.key_secret`` (0600) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    if not force and (public.exists() or secret.exists()):
        raise KeyFileError(f"{public} already exists; pass --force to replace the key pair")
    old_umask = os.umask(0o077)
    try:
        zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old_umask)
    secret.chmod(0o600)
    public.chmod(0o644)
    return public, secret


def load_public(path: Path) -> bytes:
    """The z85 public key in a ``.key`` (or ``.key_secret``) file."""
    public, _ = _load(path)
    return public


def load_secret(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file that only its owner can read."""
    mode = _stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"secret key {path} is readable by others (mode {stat.S_IMODE(mode):o}); run: chmod 600 {path}"
        )
    public, secret = _load(path)
    if not secret:
        raise KeyFileError(f"{path} holds no secret key (is it the public .key file?)")
    return public, secret


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from exc


def _load(path: Path) -> tuple[bytes, bytes | None]:
    _stat(path)
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path} is not a CurveZMQ key file: {exc}") from exc
    if public is None or len(public) != 40:
        raise KeyFileError(f"{path} holds no valid public key")
    return public, secret
