"""The launcher every analyzer starts through: limits, then a file-system view of the workspace and the system only.

An analyzer reads what the analyzed source tells it to read, and no compile flag is needed for that: the
source's own ``#include "/home/me/.ssh/id_rsa"``, an ``#include "../../other/x.h"``, a symlink in the
workspace that points out of it, ``#include_next``, ``__has_include``, ``#embed``, an assembler's
``.incbin``. Whatever it reads can come back in its alerts (an index value, a static assertion's message) and
so in the diagnostics and the model's prompt. Rewriting the source cannot close every way in (a macro can
spell the path; a header in the workspace can hold the directive), so the kernel closes them: on Linux 5.13
and later, Landlock limits the analyzer (and everything it starts) to reading the workspace, the system's
programs, libraries and headers, and the tool's own installation, and to writing its private directory.
A file outside is then "not found" for every analyzer alike, whatever spelled its path.

This file runs as a script in the child (``python -I -S confine.py SPEC TOOL ARGS...``, before ``exec``: no
``preexec_fn`` in a threaded parent), so it imports nothing but the standard library. Where Landlock is
missing (another system, an old kernel, a kernel built without it), :func:`abi` says 0 and the witnesses
do not run (``k3lsp.witnesses.analyze``): an analyzer that could read the user's files is not run on a
repository's say-so.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import resource
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

# Landlock's system calls have one number on every Linux architecture (asm-generic, 5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << b for b in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a rule on a file (not a folder) may grant
READ = READ_FILE | READ_DIR
RUN = READ | EXECUTE
WRITE = READ | WRITE_FILE | _MAKE_AND_REMOVE | REFER | TRUNCATE

REFUSED = 126  # the launcher's exit status when the kernel refused the confinement: the tool was not started
SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")  # programs, libraries, system headers
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.preload")  # the dynamic loader's; nothing else of /etc
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


def grants(workdir: str, readable: Sequence[Path], executable: str) -> list[tuple[str, int]]:
    """What one analyzer run may touch: write its private ``workdir``; read ``readable`` (the workspace) and
    this package (the semantic patches k3lsp ships); read and run the system's programs and libraries, the
    tool's own installation and this Python's (a tool installed as a wheel is a script run by it); the
    loader's cache and the null devices. A tool's installation is its ``bin``'s parent, unless that is ``/``
    or holds or lies in the home folder (``~/.local`` holds more than programs): then its ``bin`` alone."""
    home = Path(os.path.expanduser("~")).resolve()
    tool = Path(executable).resolve().parent
    shared = home.is_relative_to(tool.parent) or tool.parent.is_relative_to(home)
    prefix = tool if shared else tool.parent
    pythons = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent.parent)}
    out = [(workdir, WRITE)] + [(str(p), READ) for p in (*readable, Path(__file__).parent)]
    out += [(p, RUN) for p in (*SYSTEM, str(prefix), *sorted(pythons)) if Path(p) not in (Path("/"), home)]
    return out + [(f, READ) for f in SYSTEM_FILES] + [(d, READ | WRITE_FILE) for d in DEVICES]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _long(n: int) -> ctypes.c_long:
    """A ``syscall``/``prctl`` argument at the width the variadic C call reads (a bare int is passed as 32 bits)."""
    return ctypes.c_long(n)


@functools.cache
def abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it offers none (not Linux, too old, or disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(_long(_CREATE_RULESET), None, ctypes.c_size_t(0), _long(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _handled(version: int) -> int:
    """Every file-system right this ABI knows: what is not granted below is denied."""
    rights = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | _MAKE_AND_REMOVE
    return (
        rights | (REFER if version >= 2 else 0) | (TRUNCATE if version >= 3 else 0) | (IOCTL_DEV if version >= 5 else 0)
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def restrict(grants: list[tuple[str, int]]) -> None:
    """Confine this process and its future children to ``grants`` (path, rights), paths that do not exist
    skipped; raises OSError when the kernel refuses (the launcher then runs nothing)."""
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available")
    libc, handled = _libc(), _handled(version)
    attr = ctypes.c_uint64(handled)
    ruleset = libc.syscall(_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(8), _long(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for path, rights in grants:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            folder = stat.S_ISDIR(os.fstat(fd).st_mode)
            rule = _PathBeneath((rights if folder else rights & _FILE_ONLY) & handled, fd)
            if (
                libc.syscall(_long(_ADD_RULE), _long(ruleset), _long(_RULE_PATH_BENEATH), ctypes.byref(rule), _long(0))
                < 0
            ):
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        finally:
            os.close(fd)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, *map(_long, (1, 0, 0, 0))) < 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.syscall(_long(_RESTRICT_SELF), _long(ruleset), _long(0)) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)


def main(argv: list[str]) -> None:
    """``SPEC TOOL ARGS...``: SPEC is JSON ``{"limits": [memory, cpu, fsize], "grants": [[path, rights]...]}``
    (``grants`` null: not confined)."""
    spec = json.loads(argv[1])
    memory, cpu, fsize = spec["limits"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        if spec["grants"] is not None:
            restrict([(str(p), int(r)) for p, r in spec["grants"]])
    except OSError as e:
        sys.stderr.write(f"k3lsp: the analyzer was not started: its reads could not be confined ({e})\n")
        sys.exit(REFUSED)
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
