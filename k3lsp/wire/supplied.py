"""Files that someone else names: a repository ships them (the baseline, ``compile_commands.json``, a ``tags``
file) or a flag names them (``--server-key``, ``eval fixes --list``, a dataset, a patch file).

Such a name can lead anywhere. A symlink to ``/dev/zero`` never ends (reading it took 22 GB before the machine
killed the reader); a FIFO blocks ``open()`` until a writer comes, and a process blocked there outlived SIGTERM
(Python retries the interrupted call); a symlink out of a repository reads the user's own files as if the
repository had shipped them. So :func:`read` looks before it opens (a device is never opened: opening one can
act), opens without blocking (``O_NONBLOCK``) and, for a repository's file, without following a link out of
the repository (the real path must be inside ``root``, and the last component is opened ``O_NOFOLLOW``), takes
only a regular file by the status of the descriptor it opened (what was swapped in after the look is caught
there), and reads at most ``cap + 1`` bytes, so an endless or oversized file is refused after ``cap`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class Refused(OSError):
    """A supplied file that is not read. The message says why in words, without the path (the caller names the
    file and what it is for); an ``OSError``, so every reader's handling of an unreadable file applies."""


def read(path: str | os.PathLike[str], cap: int, root: str | os.PathLike[str] | None = None) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes; ``root``: a repository's file, which must be inside
    it (no link out). Raises :class:`Refused` for anything else, and ``OSError`` as ``open`` does (a missing
    file is ``FileNotFoundError``)."""
    with _opened(path, cap, root) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise Refused(f"it grew past the limit of {describe_size(cap)} while it was read; refused")
    return data


def _opened(path: str | os.PathLike[str], cap: int, root: str | os.PathLike[str] | None) -> BinaryIO:
    """The file open for reading, when it is a regular file of at most ``cap`` bytes by the descriptor's status."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if root is not None:
        path = inside(path, root)
        flags |= os.O_NOFOLLOW
    _regular(os.stat(path), cap)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and root is not None:
            raise Refused("it became a symbolic link while it was read; refused") from None
        raise
    try:
        _regular(os.fstat(fd), cap)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str:
    """The real path of ``path``, which must be ``root`` or below it once every link is followed."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([real, base]) != base:
        raise Refused(f"it is a symbolic link to {real}, outside {base}; a repository's file must stay inside it")
    return real


def describe_size(n: int) -> str:
    """A byte count as a person reads it: ``16 MiB``, ``64 KiB``, ``300 bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def _regular(info: os.stat_result, cap: int) -> None:
    kind = next((name for test, name in _KINDS if test(info.st_mode)), None)
    if kind is not None or not stat.S_ISREG(info.st_mode):
        raise Refused(f"it is {kind or 'not a regular file'}, not a regular file; refused")
    if info.st_size > cap:
        raise Refused(f"its {info.st_size:,} bytes are over the limit of {describe_size(cap)}; refused")
