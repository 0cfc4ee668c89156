"""The daemon on this machine: an ipc socket in a directory only the user can enter.

Loopback TCP is no boundary on a shared Mac: every local user can connect to 127.0.0.1, and while the
daemon is down or loading, anyone can bind its port and receive the code editors send, answer their tool
calls and plant findings. A Unix socket inside a directory that belongs to the user and that nobody else
may enter (mode 0700, below directories nobody else can replace) is reachable by that user (and root)
alone, and only they can create a socket there. So the daemon binds one there by default, and a client
that has checked the directory knows that it talks to its own user's daemon before it sends any code.
Daemon and clients both call ``private_socket``: whichever comes first creates the directory. The daemon
also refuses connections from other user ids on it (backend/gate.py).

Without a login session's ``/run/user/UID``, the runtime directory is ``runtime-UID`` in the shared temporary
directory, which anyone may create first: then it is theirs, platformdirs raises PermissionError, and that user's
daemon and editors stopped. The default then moves to a directory under the user's home (:func:`home_runtime`),
which nobody else can create; and an endpoint whose directory cannot be checked says why and what to do.
"""

from __future__ import annotations

import os
import stat
import tempfile
import warnings
from pathlib import Path

import platformdirs

SOCKET_NAME = "daemon.sock"


class LocalSocketError(Exception):
    """An ipc endpoint whose directory other users could enter or replace; the message says what to fix."""


def default_endpoint() -> str:
    """``ipc://<user runtime dir>/k3lsp/daemon.sock``: e.g. /run/user/1000/k3lsp/ on Linux,
    ~/Library/Caches/TemporaryItems/k3lsp/ on macOS; ``$TMPDIR/runtime-UID/k3lsp/`` without a login session,
    or :func:`home_runtime` when another user made that one first."""
    try:
        with warnings.catch_warnings():  # platformdirs warns when it falls back from an unusable XDG_RUNTIME_DIR
            warnings.simplefilter("ignore")
            base = Path(platformdirs.user_runtime_dir("k3lsp"))
    except PermissionError:  # its fallback, runtime-UID in the temporary directory, is another user's
        base = home_runtime()
    else:
        if not base.parent.is_dir():  # /run/user/UID without a login session (older platformdirs name it anyway)
            shared = Path(tempfile.gettempdir()) / f"runtime-{os.geteuid()}"
            base = shared / "k3lsp" if _mine_or_missing(shared) else home_runtime()
    return f"ipc://{base / SOCKET_NAME}"


def home_runtime() -> Path:
    """The socket directory under the user's home (``~/.cache/k3lsp/run`` on Linux): where no other user can
    create anything first."""
    return Path(platformdirs.user_cache_dir("k3lsp")) / "run"


def _mine_or_missing(path: Path) -> bool:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return True
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def private_socket(endpoint: str) -> Path:
    """The socket path of an ``ipc://`` endpoint, once its directory is known to be this user's alone.

    A missing directory (and missing parents) is created with mode 0700. Raises LocalSocketError when the
    path is relative, when the directory is not this user's or others may enter it, when a directory above
    it could be replaced by another user, or when something other than a socket has the socket's name.
    """
    path = Path(endpoint.removeprefix("ipc://"))
    if not path.is_absolute():
        raise LocalSocketError(f"{endpoint}: an ipc endpoint needs an absolute path")
    directory = path.parent
    try:
        _create(directory)
        problem = _not_private(directory) or _replaceable(directory.parent)
    except OSError as exc:  # e.g. a directory on the way is another user's, who may not be entered
        problem = (
            f"cannot check {exc.filename or directory}: {exc.strerror or exc}. A directory on the way may belong to "
            f"another user; use a socket in a directory of your own, e.g. ipc://{home_runtime() / SOCKET_NAME} "
            "(the same for k3-backend serve --bind and the editors' endpoint)"
        )
    if problem:
        raise LocalSocketError(f"{endpoint}: {problem}")
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid not in _trusted_owners():
        raise LocalSocketError(f"{endpoint}: {path} is not a socket of this user")
    return path


def _trusted_owners() -> set[int]:
    return {0, os.geteuid()}


def _create(directory: Path) -> None:
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        try:
            new.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile, maybe by someone else: the checks that follow decide
            pass
        except OSError as exc:
            raise LocalSocketError(f"cannot create {new}: {exc.strerror or exc}") from None


def _not_private(directory: Path) -> str | None:
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory"
    if info.st_uid != os.geteuid():
        return f"{directory} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if info.st_mode & 0o077:
        return f"{directory} may be entered by others (mode {stat.S_IMODE(info.st_mode):o}); run: chmod 700 {directory}"
    return None


def _replaceable(path: Path) -> str | None:
    """Why another user could swap ``path`` or a directory above it (symlinks followed), or None: each must
    belong to root or this user and, if group or others may write it, be sticky like /tmp."""
    for chain in (path, Path(os.path.realpath(path))):
        for entry in (chain, *chain.parents):
            info = entry.lstat()
            if info.st_uid not in _trusted_owners():
                return f"{entry} belongs to another user (uid {info.st_uid})"
            shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if stat.S_ISDIR(info.st_mode) and shared and not info.st_mode & stat.S_ISVTX:
                return f"{entry} is writable by others without the sticky bit"
    return None
