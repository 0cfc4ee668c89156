"""The directory of authorised client keys (``--authorized-keys``), re-read whenever it changes.

Adding or deleting a ``*.key`` file takes effect without a restart; the directory is looked at no more
than once per RELOAD_SECONDS, because the daemon asks on every message. Each key file is read on its own:
a malformed one is reported by name and skipped while the others keep working. The directory is a security
boundary (whoever can put a file in it gets in), so a directory that another user owns or that group or
others may write refuses every client until it is fixed (``serve`` refuses to start with one, see
backend/auth.py), and a key file that others may write, or that is not a regular file, is skipped.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

from k3lsp.wire import keys, supplied

log = logging.getLogger(__name__)

RELOAD_SECONDS = 1.0  # how stale the allow-list may be: the price of not scanning a directory per message


def unsafe(path: Path, info: os.stat_result) -> str | None:
    """Why a file or directory others could change must not decide who gets in, or None."""
    if info.st_uid not in (os.getuid(), 0):
        return f"{path} is owned by another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); run: chmod go-w {path}"
    return None


def read_key(path: Path) -> bytes:
    """The z85 public key of one ``.key`` file, parsed as k3lsp parses one (``k3lsp.wire.keys``); ValueError (or
    OSError) says what is wrong with it."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    problem = unsafe(path, info)
    if problem:
        raise ValueError(problem)
    public, _ = keys.parse(supplied.read(path, keys.MAX_KEY_BYTES))  # FileNotFoundError: deleted meanwhile
    return public


class AllowList:
    """The z85 public keys of authorised clients, re-read when the directory changes."""

    def __init__(self, directory: Path, reload_seconds: float = RELOAD_SECONDS):
        self.directory = directory
        self.reload_seconds = reload_seconds
        self.problems: list[str] = []  # why files (or the directory) were skipped at the last reading
        self._checked: float | None = None  # monotonic time of the last look at the directory
        self._stamp: tuple | None = None
        self._keys: frozenset[bytes] = frozenset()

    def _current_stamp(self) -> tuple:
        try:
            info = self.directory.stat()
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except OSError:
            return ()
        stamp: list[tuple] = [(info.st_mode, info.st_uid)]
        for entry in entries:
            if not entry.name.endswith(".key"):
                continue
            try:  # a key file removed between scandir and stat is simply gone
                key_info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            stamp.append((entry.name, key_info.st_mtime_ns, key_info.st_size, key_info.st_mode, key_info.st_uid))
        return tuple(stamp)

    def _read(self) -> tuple[frozenset[bytes], list[str]]:
        try:
            problem = unsafe(self.directory, self.directory.stat())
            names = sorted(name for name in os.listdir(self.directory) if name.endswith(".key"))
        except OSError as exc:
            return frozenset(), [f"cannot read {self.directory}: {exc.strerror or exc}"]
        if problem:
            return frozenset(), [f"{problem}: refusing every client until it is fixed"]
        found, problems = set(), []
        for name in names:
            try:
                found.add(read_key(self.directory / name))
            except FileNotFoundError:  # deleted since the listing
                continue
            except (OSError, ValueError) as exc:
                problems.append(f"{self.directory / name}: {exc}: skipped")
        return frozenset(found), problems

    def keys(self) -> frozenset[bytes]:
        now = time.monotonic()
        if self._checked is not None and now - self._checked < self.reload_seconds:
            return self._keys
        self._checked = now
        stamp = self._current_stamp()
        if stamp != self._stamp:
            self._keys, self.problems = self._read()
            for problem in self.problems:
                log.error("authorized keys: %s", problem)
            self._stamp = stamp if self._current_stamp() == stamp else None  # changed while reading: again
            log.info("authorized client keys: %d (from %s)", len(self._keys), self.directory)
        return self._keys

    def allows(self, z85_key: bytes | str) -> bool:
        key = z85_key.encode() if isinstance(z85_key, str) else z85_key
        return key in self.keys()
