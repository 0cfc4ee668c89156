"""The workspace's own `tags` file (what the kernel's ``make tags`` writes), read as untrusted input.

A tags line is ``name<TAB>file<TAB>address;"<TAB>fields``, and the address is an ex command: a line number, a
search pattern, or anything ``vi`` would run (``:!rm -rf ~``). Nothing here runs: a number is taken as the line,
a ``/pattern/`` or ``?pattern?`` is looked up in the file by this module (``make tags`` writes no ``line:``
field), and every other address is skipped. The file is at most ``MAX_BYTES``, a line at most ``MAX_LINE``;
a file a line names must be one of the sandbox's listing (so no `..`, absolute path outside, hidden file,
symlink out, hard link or secret), and must not have changed since the tags file was written (else the index
takes it from its own indexer).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from k3lsp.tools import confine

log = logging.getLogger(__name__)

NAME = "tags"
MAX_BYTES = 256 * 1024 * 1024
MAX_LINE = 4096
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
# ctags' one-letter kinds of C and C++, as the long names the index keeps.
_KINDS = {
    "f": "function",
    "p": "prototype",
    "d": "macro",
    "s": "struct",
    "u": "union",
    "g": "enum",
    "e": "enumerator",
    "t": "typedef",
    "v": "variable",
    "x": "externvar",
    "c": "class",
    "n": "namespace",
}

Row = tuple[str, str, int, int | None, str]  # name, path, line, end line, kind


@dataclass
class Seed:
    files: set[str]  # the files the tags file speaks for (listed, unchanged since it was written)
    tags: list[Row]
    skipped: int  # lines not used: pseudo-tags aside, malformed, unknown kind, other files, unusable addresses


def read(root: Path, listing: dict[str, os.stat_result]) -> Seed | None:
    """The usable tags of ``root/tags``, or None when there is no such file the sandbox would show."""
    try:
        real = confine.resolve(root, NAME)
        info = confine.check_file(real, NAME)
    except confine.ToolError:
        return None
    if info.st_size > MAX_BYTES:
        log.info("%s/%s is over %d bytes: not used", root, NAME, MAX_BYTES)
        return None
    seed = Seed(set(), [], 0)
    wanted: dict[str, list[tuple[str, str, str, int | None]]] = {}  # file -> (name, address, kind, end)
    with real.open("rb") as f:
        for raw in f:
            parsed = _line(raw, root, listing, info.st_mtime_ns)
            if parsed is None:
                seed.skipped += not raw.startswith(b"!_")
                continue
            rel, entry = parsed
            wanted.setdefault(rel, []).append(entry)
    for rel, entries in wanted.items():
        rows = _placed(root, rel, entries)
        seed.skipped += len(entries) - len(rows)
        seed.tags += rows
        seed.files.add(rel)
    return seed


def _line(raw: bytes, root: Path, listing: dict[str, os.stat_result], written: int):
    """One tags line as (file, (name, address, kind, end)), or None when it cannot be used."""
    if len(raw) > MAX_LINE or raw.startswith(b"!_"):
        return None
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return None
    parts = text.split("\t")
    if len(parts) < 3 or not _IDENTIFIER.fullmatch(parts[0]):
        return None
    name, file, rest = parts[0], parts[1], "\t".join(parts[2:])
    address, _, fields = rest.partition(';"')
    rel = _workspace_path(root, file)
    if rel is None or rel not in listing or listing[rel].st_mtime_ns > written:
        return None
    kind, end, line = "", None, None
    for field in fields.split("\t"):
        key, colon, value = field.partition(":")
        if not colon and key in _KINDS:
            kind = _KINDS[key]
        elif key == "kind":
            kind = _KINDS.get(value, value)
        elif key in ("line", "end") and value.isdigit():
            line, end = (int(value), end) if key == "line" else (line, int(value))
    if kind not in _KINDS.values():
        return None
    return rel, (name, str(line) if line is not None else address, kind, end)


def _workspace_path(root: Path, file: str) -> str | None:
    """A tags line's file as a workspace-relative path (relative to the tags file, or absolute inside root)."""
    if not file or "\0" in file:
        return None
    path = PurePosixPath(file)
    if path.is_absolute():
        if not Path(file).is_relative_to(root):
            return None
        path = PurePosixPath(Path(file).relative_to(root).as_posix())
    parts = [p for p in path.parts if p != "."]
    return "/".join(parts) if parts and ".." not in parts else None


def _placed(root: Path, rel: str, entries: list[tuple[str, str, str, int | None]]) -> list[Row]:
    """Line numbers for a file's entries: a number as it is, a search pattern looked up in the file."""
    lines: list[str] | None = None
    rows: list[Row] = []
    for name, address, kind, end in entries:
        address = address.strip()
        if address.isdigit():
            number: int | None = int(address)
        elif len(address) >= 2 and address[0] in "/?" and address[-1] == address[0]:
            if lines is None:
                try:
                    lines = confine.read_text(root / rel, rel).split("\n")
                except (confine.ToolError, OSError):
                    return []
            number = _find(lines, address[1:-1], address[0])
        else:  # an ex command of another shape: never run, never used
            number = None
        if number is not None and number > 0 and (end is None or end >= number):
            rows.append((name, rel, number, end, kind))
    return rows


def _find(lines: list[str], pattern: str, delimiter: str) -> int | None:
    """The 1-based line a ctags search pattern names: ``^`` text ``$``, with ``\\`` escaping the delimiter and
    itself; without ``$`` (ctags cuts long lines) a line that starts so."""
    anchored_end = pattern.endswith("$") and not pattern.endswith("\\$")
    body = pattern.removeprefix("^").removesuffix("$") if anchored_end else pattern.removeprefix("^")
    text = re.sub(r"\\(.)", lambda m: m.group(1) if m.group(1) in (delimiter, "\\") else m.group(0), body)
    for n, line in enumerate(lines, 1):
        if line == text if anchored_end else line.startswith(text):
            return n
    return None
