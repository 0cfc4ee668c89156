"""CurveZMQ key pairs for editors and daemons: created private, loaded with a permission check.

pyzmq's ``create_certificates`` writes the secret file with the process umask (0644 on most machines,
measured with pyzmq), so the secret key of the machine that sees everyone's source code
would be world-readable. Here secret files are created 0600 inside a 0700 directory, and a secret file
that others can read is refused on load, the way ssh refuses a private key.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import stat
import struct
from pathlib import Path

import platformdirs
import zmq
import zmq.auth
from zmq.utils import z85

from k3lsp.wire import supplied

MAX_KEY_BYTES = 64 * 1024  # a key file is ~300 bytes; a flag may name /dev/zero
# One key line of a ZPL certificate (pyzmq's format): `public-key = "z85"`, quotes optional, not in a comment.
_KEY_LINE = re.compile(rb"^[ \t]*(?P<half>public|secret)-key[ \t]*=[ \t]*[\"']?(?P<key>[^\"'\s]*)", re.M)


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


def default_dir(app: str) -> Path:
    """Where ``keys init`` puts the key pair of ``app`` (k3lsp or k3-backend) by default."""
    return Path(platformdirs.user_config_dir(app)) / "keys"


def default_client_name() -> str:
    """user-host: the file name the daemon admin sees in authorized/, so each editor's key is told apart."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{user}-{socket.gethostname().split('.')[0]}") or "client"


def init_server(directory: Path, *, force: bool = False) -> str:
    """`k3-backend keys init`: the daemon's key pair and an empty ``authorized/``; returns what to do next."""
    public, secret = init_keypair(directory, "server", force=force)
    authorized = directory / "authorized"
    authorized.mkdir(mode=0o700, exist_ok=True)
    return (
        f"server secret key: {secret} (mode 600; never copy it off this machine)\n"
        f"server public key: {public}\n"
        f"authorized clients: {authorized}/ (one *.key per editor; delete a file to revoke it, no restart)\n"
        "next:\n"
        f"  1. copy {public} to every editor machine and set it as serverKey (k3lsp status --server-key)\n"
        f"  2. put each editor's public key (from `k3lsp keys init`) into {authorized}/\n"
        f"  3. k3-backend serve ... --server-key {secret} --authorized-keys {authorized}"
    )


def init_client(directory: Path, name: str, *, force: bool = False) -> str:
    """`k3lsp keys init`: this editor's key pair; returns what to hand to the daemon admin."""
    public, secret = init_keypair(directory, name, force=force)
    return (
        f"client secret key: {secret} (mode 600; set it as clientKey)\n"
        f"client public key: {public}\n"
        "next:\n"
        f"  1. give {public} to the daemon admin, who copies it into the daemon's authorized/ directory\n"
        "  2. get the daemon's server.key and set it as serverKey\n"
        f"  3. check: k3lsp status --endpoint tcp://HOST:5555 --server-key server.key --client-key {secret}"
    )


def load_public(path: Path) -> bytes:
    """The z85 public key in a ``.key`` (or ``.key_secret``) file."""
    public, _ = _load(path)
    return public


def load_secret(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file that only its owner can read."""
    public, secret = _load(path)
    if not secret:  # checked first: a public .key given by mistake is named as such, not as "readable"
        raise KeyFileError(f"{path} holds no secret key (is it the public .key file?)")
    mode = _stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"secret key {path} is readable by others (mode {stat.S_IMODE(mode):o}); run: chmod 600 {path}"
        )
    return public, secret


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from exc


def _load(path: Path) -> tuple[bytes, bytes | None]:
    """(public, secret) of a key file, read as a file a flag names (``k3lsp.wire.supplied``: regular, bounded, never
    blocking): pyzmq's own reader read ``/dev/zero`` until memory ran out."""
    try:
        data = supplied.read(path, MAX_KEY_BYTES)
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc.strerror or exc}") from exc
    try:
        return parse(data)
    except ValueError as exc:
        raise KeyFileError(f"{path} is not a CurveZMQ key file: {exc}") from None


def parse(data: bytes) -> tuple[bytes, bytes | None]:
    """(public, secret) of a key file's bytes as pyzmq writes them (``public-key = "..."`` lines, ``#`` comments);
    ValueError says in words what is wrong. pyzmq's parser raised IndexError on a line without ``=`` and took a key
    that is no z85, which failed later as "ZMQError: Invalid argument"."""
    found: dict[bytes, bytes] = {}
    for m in _KEY_LINE.finditer(data):
        found.setdefault(m["half"], m["key"])
    public, secret = found.get(b"public"), found.get(b"secret")
    if public is None:
        raise ValueError('it has no public-key = "..." line')
    for half, key in ((b"public", public), (b"secret", secret)):
        if key is not None and not _z85_key(key):
            raise ValueError(f"its {half.decode()} key is not 40 z85 characters")
    return public, secret


def _z85_key(key: bytes) -> bool:
    """Whether ``key`` is a CurveZMQ key in z85: 40 characters that decode to 32 bytes."""
    try:
        return len(key) == 40 and len(z85.decode(key)) == 32
    except (ValueError, KeyError, struct.error):  # a character outside z85, a group over 2**32
        return False
