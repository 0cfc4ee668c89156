"""Each rank's own exit code, written where `k3-backend supervise` reads it.

`mlx.launch` exits 0 whatever its ranks return, so a supervisor cannot learn from it how the pair ended.
`supervise` names a directory in K3_EXIT_STATUS_DIR (through `mlx.launch --env`, which exports it on every
host), and `serve` writes ``rank-N.json`` there as it exits, from every exit path (``os._exit`` included).
These files are the only exit codes the supervisor believes besides its command's own: a rank that writes
nothing (killed by a signal, or on another host) has no code, whatever any output says.

The directory's name is in the launch command, which every user of a rank's host can read, and on a host
other than the supervisor's it does not exist until the rank makes it. So the rank creates it 0700, and
uses it only when it is a real directory (not a symlink) that belongs to this user and that nobody else may
write; its files are created new (``O_EXCL``) and opened without following links (``O_NOFOLLOW``), relative
to the directory as opened, and the supervisor reads them the same way. A directory another user planted
gets nothing, and says nothing the supervisor believes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ENV = "K3_EXIT_STATUS_DIR"
RANK_FAILURE_EXIT = 3  # serve's exit code when a rank of the pair failed (a supervisor restarts the pair)
STATUS_NAME = re.compile(r"rank-(\d+)\.json")
MAX_STATUS_BYTES = 4096


class UnsafeDirectory(OSError):
    """The status directory could be another user's: not used."""


def record(code: int) -> None:
    """Write this rank's exit code, if a supervisor asked for it; never raises (the process is ending)."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    try:
        rank = int(os.environ.get("MLX_RANK", "0"))
        data = json.dumps({"rank": rank, "code": int(code), "pid": os.getpid()}).encode()
        with _private_dir(Path(directory), create=True) as fd:
            tmp = f"rank-{rank}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):  # left by an earlier process of this pid (the folder is ours)
                os.unlink(tmp, dir_fd=fd)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            try:
                os.write(out, data)
            finally:
                os.close(out)
            os.replace(tmp, f"rank-{rank}.json", src_dir_fd=fd, dst_dir_fd=fd)
    except UnsafeDirectory as exc:
        print(f"k3-backend: exit status not written: {exc}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def read(directory: Path) -> dict[int, int]:
    """rank -> exit code, for every rank that wrote one; malformed files, links and an unsafe directory are
    ignored."""
    codes: dict[int, int] = {}
    with contextlib.suppress(OSError), _private_dir(directory, create=False) as fd:
        for name in sorted(os.listdir(fd)):
            if STATUS_NAME.fullmatch(name) is None:
                continue
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                with os.fdopen(os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd), "rb") as f:
                    data = json.loads(f.read(MAX_STATUS_BYTES))
                codes[int(data["rank"])] = int(data["code"])
    return codes


@contextlib.contextmanager
def _private_dir(path: Path, *, create: bool) -> Iterator[int]:
    """A descriptor of ``path`` when it is a directory of this user's that nobody else may write (created 0700
    when missing and ``create``); raises UnsafeDirectory (or OSError) otherwise."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if path.is_symlink():
            raise UnsafeDirectory(f"{path} is a symlink") from exc
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafeDirectory(f"{path} belongs to uid {st.st_uid}, not to this user")
        if st.st_mode & 0o022:
            raise UnsafeDirectory(f"{path} may be written by others (mode {st.st_mode & 0o777:o})")
        yield fd
    finally:
        os.close(fd)
