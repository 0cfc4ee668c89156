"""Compile flags for the analyzers: the workspace's ``compile_commands.json`` when it has one, kept to what is safe.

A compile database belongs to the repository, and the repository is untrusted: its flags can load code into
the compiler (``-fplugin=``, ``-Xclang -load``), swap the compiler's own programs (``-B``, ``-specs=``,
``-wrapper``), pull in more arguments (``@file``), write files anywhere (``-o``, ``-MF``, ``-fdump-*``) or read
a file from outside the workspace into the diagnostics (``-include /home/me/.ssh/id_rsa``). So no flag is taken
unless it is on the allow-list below, and every path a kept flag names must resolve (symlinks followed) into the
workspace or a system include directory; everything else is dropped, and the drops are counted so the status
can say so. What is kept: macros (``-D``, ``-U``), include directories and forced includes (``-I``,
``-isystem``, ``-iquote``, ``-idirafter``, ``-include``), the language standard and a few code-generation
switches that change what the analyzers see (``-std=``, ``-funsigned-char``, ``-m32``...).
"""

from __future__ import annotations

import contextlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.wire import supplied

DATABASE = "compile_commands.json"
MAX_DATABASE_BYTES = 64 * 1024 * 1024
SYSTEM_DIRS = (Path("/usr/include"), Path("/usr/local/include"), Path("/usr/lib/gcc"), Path("/usr/lib/llvm"))
PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include")  # each takes a path, joined or as the next arg
SWITCHES = frozenset(
    {"-funsigned-char", "-fsigned-char", "-fshort-wchar", "-fno-common", "-fms-extensions", "-m32", "-m64",
     "-nostdinc", "-ansi", "-pthread"}
)  # fmt: skip


@dataclass(frozen=True)
class Flags:
    """The flags kept for one file, as gcc spells them (each adapter translates), and how many were dropped."""

    defines: tuple[str, ...] = ()  # "-DNAME=VALUE" and "-UNAME"
    includes: tuple[tuple[str, str], ...] = ()  # (flag, absolute path): -I, -isystem, -iquote, -idirafter, -include
    std: str | None = None  # "c11", "gnu89", ...
    switches: tuple[str, ...] = ()
    dropped: tuple[str, ...] = field(default=(), compare=False)  # what was left out, for the status and the log

    def gcc(self) -> list[str]:
        """The flags on a gcc, clang or sparse command line."""
        out = list(self.defines)
        for flag, path in self.includes:
            out += [flag, path]
        if self.std:
            out.append(f"-std={self.std}")
        return out + list(self.switches)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def allowed_path(raw: str, base: Path, root: Path) -> Path | None:
    """``raw`` (relative to ``base``) resolved, if it lies in the workspace ``root`` or a system include dir."""
    try:
        path = (base / raw).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if _inside(path, root.resolve()) or any(_inside(path, d) for d in SYSTEM_DIRS):
        return path
    return None


def filtered(args: list[str], base: Path, root: Path) -> Flags:
    """The safe flags among ``args`` (the compiler and the file already removed); ``base`` is the entry's
    directory, against which relative paths are read."""
    defines: list[str] = []
    includes: list[tuple[str, str]] = []
    switches: list[str] = []
    dropped: list[str] = []
    std = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        flag = next((f for f in PATH_FLAGS if arg == f or (arg.startswith(f) and f != "-include")), None)
        if flag is not None:
            raw = arg[len(flag) :] if arg != flag else (args[i] if i < len(args) else "")
            i += arg == flag
            path = allowed_path(raw, base, root) if raw else None
            if path is None:
                dropped.append(f"{flag} {raw}")
            else:
                includes.append((flag, str(path)))
        elif arg.startswith(("-D", "-U")) and len(arg) > 2:
            defines.append(arg)
        elif arg in ("-D", "-U") and i < len(args):
            defines.append(arg + args[i])
            i += 1
        elif arg.startswith("-std=") and arg[5:].replace("+", "").isalnum():
            std = arg[5:]
        elif arg in SWITCHES:
            switches.append(arg)
        elif arg.startswith("-"):
            dropped.append(arg)
            if arg in ("-o", "-MF", "-MT", "-MQ", "-Xclang", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-x"):
                i += 1  # and the argument it takes
        else:
            dropped.append(arg)  # a file operand (another source, an object) or junk
    return Flags(tuple(defines), tuple(includes), std, tuple(switches), tuple(dropped))


def _entry_args(entry: dict) -> list[str] | None:
    if isinstance(entry.get("arguments"), list) and all(isinstance(a, str) for a in entry["arguments"]):
        return list(entry["arguments"])
    if isinstance(entry.get("command"), str):
        with contextlib.suppress(ValueError):
            return shlex.split(entry["command"])
    return None


def for_file(path: Path, root: Path) -> Flags | None:
    """The kept flags of ``path`` from ``root``'s compile database; None when there is none, or no entry for it.

    Only ``root/compile_commands.json`` is read (``build/`` is where CMake writes it: that one too), as the
    repository's file (``k3lsp.wire.supplied``: a regular file inside ``root``, bounded in size); an unreadable,
    refused or malformed database is the same as none."""
    target = path.resolve()
    for db in (root / DATABASE, root / "build" / DATABASE):
        try:
            entries = json.loads(supplied.read(db, MAX_DATABASE_BYTES, root).decode("utf-8", errors="replace"))
        except (OSError, ValueError):
            continue
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                continue
            base = Path(entry["directory"]) if isinstance(entry.get("directory"), str) else root
            try:
                if (base / entry["file"]).resolve() != target:
                    continue
            except (OSError, RuntimeError, ValueError):
                continue
            args = _entry_args(entry)
            if args is None:
                return Flags(dropped=("an entry that is neither `arguments` nor `command`",))
            rest = [a for a in args[1:] if a != entry["file"]]
            return filtered(rest, base, root)
    return None
