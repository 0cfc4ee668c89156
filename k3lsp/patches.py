"""What a patch did to one file: its hunks, the lines it added or modified, and the file after it.

Two kinds of input reach a review. Patch text (a patch file, the mails of a series) is parsed by unidiff. A
change git already holds (a commit, the index, the work tree) is read by libgit2 (``k3lsp.gitrepo``: which
files, renames), and each file's lines are diffed blob to blob here (:func:`between`) into the same unified
form and parsed the same way. Either way the review sees one :class:`FileChange` per file, whose hunks are
unidiff's.

Which lines a patch changed (:func:`changed_lines`): the lines it added or modified in the post-image, and for a
pure deletion inside a function (lines removed, none added in their place) the line that now follows it, so that
a removed check still marks the function (and the line) it was taken from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pygit2
import unidiff
from pygit2.enums import DiffOption
from unidiff.constants import LINE_TYPE_NO_NEWLINE

CONTEXT_LINES = 3  # as git diff and git format-patch
_DEV_NULL = "/dev/null"


class PatchError(ValueError):
    """A patch that cannot be read, or does not apply to the file it names."""


@dataclass(frozen=True)
class FileChange:
    """One file of a patch: its path before and after (None: the patch adds or deletes it), whether its content
    is binary (then it has no hunks), and the hunks, in order."""

    old_path: str | None
    new_path: str | None
    binary: bool
    hunks: tuple[unidiff.Hunk, ...] = ()


def decode(data: bytes) -> str:
    """Bytes of a file or patch as text that encodes back to the same bytes (any encoding, any garbage)."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def parse(text: str) -> list[FileChange]:
    """The files of a unified diff (``git diff``, ``git format-patch``, ``diff -u``); text around it is ignored."""
    try:
        patch = unidiff.PatchSet(text.splitlines(keepends=True))
    except unidiff.UnidiffParseError as exc:
        raise PatchError(f"not a unified diff: {exc}") from None
    return [_file(f) for f in patch]


def _file(f: unidiff.PatchedFile) -> FileChange:
    old = None if f.is_added_file or f.source_file == _DEV_NULL else _strip(f.source_file)
    new = None if f.is_removed_file or f.target_file == _DEV_NULL else _strip(f.target_file)
    return FileChange(old, new, f.is_binary_file, tuple(f))


def _strip(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def between(old: bytes, new: bytes) -> tuple[unidiff.Hunk, ...]:
    """The hunks that turn ``old`` into ``new``: libgit2's diff of the two buffers (git's indent heuristic, as
    ``git diff`` has by default), with no path, so no attribute or diff driver of any repository applies."""
    patch = pygit2.Patch.create_from(old, new, flag=DiffOption.INDENT_HEURISTIC, context_lines=CONTEXT_LINES)
    (change,) = parse(decode(patch.data)) or [FileChange(None, None, False)]
    return change.hunks


def changed_lines(hunks: Iterable[unidiff.Hunk]) -> set[int]:
    """The 1-based post-image lines the hunks added or modified, and the line after each pure deletion."""
    out: set[int] = set()
    for hunk in hunks:
        lines = [line for line in hunk if not _no_newline(line)]
        last = hunk.target_start - 1 if hunk.target_length else hunk.target_start  # the post line before the next
        for i, line in enumerate(lines):
            if line.is_added:
                out.add(line.target_line_no)
            elif line.is_removed and _pure_deletion_ends(lines, i):
                out.add(last + 1)
            if line.target_line_no is not None:
                last = line.target_line_no
    return out


def _pure_deletion_ends(lines: Sequence[unidiff.patch.Line], i: int) -> bool:
    """Line ``i`` ends a run of removed lines that no added line stands beside."""
    if i + 1 < len(lines) and (lines[i + 1].is_removed or lines[i + 1].is_added):
        return False
    j = i
    while j >= 0 and lines[j].is_removed:
        j -= 1
    return j < 0 or not lines[j].is_added


def _no_newline(line: unidiff.patch.Line) -> bool:
    return line.line_type == LINE_TYPE_NO_NEWLINE


def apply(old: bytes, change: FileChange) -> bytes:
    """The file after ``change``: each hunk where its header says or, as ``patch`` does, at the nearest place
    its context and removed lines match exactly (an offset, never fuzz). Raises PatchError when one does not."""
    lines = decode(old).splitlines(keepends=True)
    out: list[str] = []
    pos = offset = 0
    for n, hunk in enumerate(change.hunks, 1):
        want, new = _sides(hunk)
        nominal = hunk.source_start if hunk.source_length == 0 else hunk.source_start - 1
        at = _find(lines, want, max(nominal + offset, pos), pos)
        if at is None:
            where = change.old_path or change.new_path
            raise PatchError(f"{where}: hunk {n} (line {hunk.source_start}) does not apply")
        out += lines[pos:at] + new
        pos, offset = at + len(want), at - nominal
    return encode("".join(out + lines[pos:]))


def _sides(hunk: unidiff.Hunk) -> tuple[list[str], list[str]]:
    """A hunk's lines before and after, each with its end of line (none where the patch says "\\ No newline")."""
    before: list[str] = []
    after: list[str] = []
    last = None
    for line in hunk:
        if _no_newline(line):
            if last is None:
                continue
            for side in (before, after) if last.is_context else (before,) if last.is_removed else (after,):
                side[-1] = side[-1].rstrip("\r\n")
            continue
        if not line.is_added:
            before.append(line.value)
        if not line.is_removed:
            after.append(line.value)
        last = line
    return before, after


def _find(lines: list[str], want: list[str], start: int, floor: int) -> int | None:
    """Where ``want`` matches ``lines`` (line ends aside): at ``start``, else the nearest place at or after
    ``floor`` (what earlier hunks consumed)."""
    key = [w.rstrip("\r\n") for w in want]

    def matches(at: int) -> bool:
        return at + len(key) <= len(lines) and all(lines[at + k].rstrip("\r\n") == w for k, w in enumerate(key))

    for distance in range(max(start - floor, len(lines) - start) + 1):
        for at in (start - distance, start + distance):
            if floor <= at <= len(lines) and matches(at):
                return at
    return None
