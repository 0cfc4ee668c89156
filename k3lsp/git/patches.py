"""What a patch did to one file: its hunks, the lines it added or modified, and the file after it.

Two kinds of input reach a review. Patch text (a patch file, the mails of a series) is parsed by unidiff. A
change git already holds (a commit, the index, the work tree) is read by libgit2 (``k3lsp.git.repo``: which
files, renames), and each file's lines are diffed blob to blob here (:func:`between`) into the same unified
form and parsed the same way. Either way the review sees one :class:`FileChange` per file, whose hunks are
unidiff's.

Which lines a patch changed (:func:`changed_lines`): the lines it added or modified in the post-image, and for a
pure deletion inside a function (lines removed, none added in their place) the line that now follows it, so that
a removed check still marks the function (and the line) it was taken from.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pygit2
import unidiff
from pygit2.enums import DiffOption
from unidiff.constants import LINE_TYPE_EMPTY, LINE_TYPE_NO_NEWLINE

CONTEXT_LINES = 3  # as git diff and git format-patch
SEARCH_FACTOR = 64  # lines searched to place a patch's hunks, per line of the file and of the patch, at most
_DEV_NULL = "/dev/null"
_NO_NEWLINE = "\\ No newline at end of file\n"
_PATCHED = "\0"  # the code of a line a hunk wrote: no line of a file has it
_C_SPACE = " \t\n\v\f\r"  # C's isspace, which git's line hash skips


class PatchError(ValueError):
    """A patch that cannot be read, or does not apply to the file it names."""


@dataclass(frozen=True)
class FileChange:
    """One file of a patch: its path before and after (None: the patch adds or deletes it), whether its content
    is binary (then it has no hunks), the hunks, in order, and whether it copies ``old_path`` (which stays)
    rather than renaming it."""

    old_path: str | None
    new_path: str | None
    binary: bool
    hunks: tuple[unidiff.Hunk, ...] = ()
    copy: bool = False


def decode(data: bytes) -> str:
    """Bytes of a file or patch as text that encodes back to the same bytes (any encoding, any garbage)."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def parse(text: str) -> list[FileChange]:
    """The files of a unified diff (``git diff``, ``git format-patch``, ``diff -u``); text around it is ignored.
    Any line starting with a backslash and a space is the "\\ No newline at end of file" mark, as git takes it in
    whatever language ``diff`` wrote it (unidiff knows the English one only, after a hunk)."""
    lines = [_NO_NEWLINE if line.startswith("\\ ") else line for line in split_lines(text)]
    try:
        patch = unidiff.PatchSet(lines)
    except unidiff.UnidiffParseError as exc:
        raise PatchError(f"not a unified diff: {exc}") from None
    return [_file(f) for f in patch]


def _file(f: unidiff.PatchedFile) -> FileChange:
    # Added or deleted only when a side is /dev/null, as git reads it: not when a hunk empties the file or fills an
    # empty one (unidiff's is_added_file and is_removed_file guess so).
    old = None if f.source_file == _DEV_NULL else _strip(f.source_file)
    new = None if f.target_file == _DEV_NULL else _strip(f.target_file)
    copy = any(line.startswith("copy from ") for line in f.patch_info or ())
    return FileChange(old, new, f.is_binary_file, tuple(f), copy)


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
    """The file after ``change``, as ``git apply`` (so ``git am``) makes it: lines end at ``\\n`` alone, and each hunk
    goes where git puts it (:class:`_Image`), never with fuzz. Raises PatchError when git would refuse a hunk, and
    when placing the hunks costs more than ``SEARCH_FACTOR`` times the lines of the file and the patch."""
    image = _Image(decode(old))
    where = change.old_path or change.new_path
    budget = SEARCH_FACTOR * (len(image.lines) + sum(len(hunk) for hunk in change.hunks))
    for n, hunk in enumerate(change.hunks, 1):
        before, after, trailing = _sides(hunk)
        at, spent = image.find(before, max(hunk.target_start - 1, 0), hunk.source_start <= 1, trailing == 0)
        budget -= spent
        if budget < 0:
            raise PatchError(
                f"{where}: hunk {n} (line {hunk.source_start}) lies too far from where its header puts it: placing "
                f"the patch's hunks would search more than {SEARCH_FACTOR} lines per line of the file and the patch, "
                "so the patch is refused"
            )
        if at is None:
            raise PatchError(f"{where}: hunk {n} (line {hunk.source_start}) does not apply")
        image.replace(at, len(before), after)
    return encode("".join(image.lines))


def _sides(hunk: unidiff.Hunk) -> tuple[list[str], list[str], int]:
    """A hunk's lines before and after, each with its ``\\n`` (none where the next line of the patch is git's
    "\\ No newline" mark), and its trailing context: the context lines after its last added or removed one. A
    blank line unidiff appends after a complete hunk is no part of it, for git."""
    before: list[str] = []
    after: list[str] = []
    trailing = 0
    last = None
    for line in hunk:
        if _no_newline(line):
            if last is not None:
                for side in (before, after) if last.is_context else (before,) if last.is_removed else (after,):
                    side[-1] = side[-1].removesuffix("\n")
            continue
        if line.line_type == LINE_TYPE_EMPTY:
            continue
        if not line.is_added:
            before.append(line.value)
        if not line.is_removed:
            after.append(line.value)
        trailing = trailing + 1 if line.is_context else 0
        last = line
    return before, after, trailing


class _Image:
    """A file as git patches it: its lines, and each line as one character of ``codes`` (equal lines, equal
    characters), so that a hunk is found by ``str.find`` (linear: CPython's two-way search) instead of line by
    line at every place (quadratic). A line an earlier hunk wrote is ``_PATCHED``, a character no line has: git
    never matches a hunk against what another hunk of the same diff wrote."""

    def __init__(self, text: str):
        self.lines = split_lines(text)
        self._codes: dict[str, str] = {}
        self.codes = "".join(map(self._code, self.lines))

    def _code(self, line: str) -> str:
        code = self._codes.get(line)
        if code is None:
            if len(self._codes) + 1 > sys.maxunicode:
                raise PatchError(f"more than {sys.maxunicode} different lines in one file; not applied")
            code = self._codes[line] = chr(len(self._codes) + 1)
        return code

    def replace(self, at: int, count: int, lines: list[str]) -> None:
        self.lines[at : at + count] = lines
        self.codes = self.codes[:at] + _PATCHED * len(lines) + self.codes[at + count :]

    def find(self, want: list[str], line: int, beginning: bool, end: bool) -> tuple[int | None, int]:
        """Where git's ``find_pos`` puts a hunk whose pre-image is ``want``, and the lines searched. A hunk that
        starts at the file's first line must match there, one without trailing context at the file's end;
        any other is tried at ``line`` (its post-image position), then one line after, one before, two after...
        A last pre-image line without its newline matches a line that adds only whitespace to it (git compares
        its bytes alone), except at the end, where the file must end with it."""
        limit = len(self.lines) - len(want)  # the last place where it fits
        if limit < 0:
            return None, 0
        tail = want[-1] if want and not want[-1].endswith("\n") else None
        key = "".join(map(self._code, want if tail is None else want[:-1]))
        if beginning or end:
            at = 0 if beginning else limit
            fits = (not end or at == limit) and self.codes.startswith(key, at) and self._tail(at, want, tail, end)
            return (at if fits else None), len(want)
        line = min(line, limit)
        if self.codes.startswith(key, line) and self._tail(line, want, tail, False):
            return line, len(want)  # where its header says: every hunk of a patch made for this file
        ahead, behind = self._after(key, line), self._before(key, line)
        spent = 0  # each place tried costs the hunk's length; the lines passed on the way, the distance
        f, b = next(ahead, None), next(behind, None)
        while f is not None or b is not None:
            if b is None or (f is not None and f - line <= line - b):
                at, f = f, next(ahead, None)
            else:
                at, b = b, next(behind, None)
            spent += len(want)
            if at <= limit and self._tail(at, want, tail, False):
                return at, spent + 2 * abs(at - line)
        return None, spent + len(self.lines)

    def _tail(self, at: int, want: list[str], tail: str | None, end: bool) -> bool:
        if tail is None:
            return True
        last = at + len(want) - 1
        if self.codes[last] == _PATCHED:
            return False
        text = self.lines[last]
        return text == tail if end else text.startswith(tail) and not text[len(tail) :].strip(_C_SPACE)

    def _after(self, key: str, line: int) -> Iterator[int]:
        """Where ``key`` starts at or after ``line``, nearest first."""
        at = self.codes.find(key, line)
        while at != -1:
            yield at
            at = self.codes.find(key, at + 1)

    def _before(self, key: str, line: int) -> Iterator[int]:
        """Where ``key`` starts before ``line``, nearest first (searched forward in the reversed codes: ``rfind``
        has no linear algorithm)."""
        reverse, size = self.codes[::-1], len(self.codes)
        at = reverse.find(key[::-1], max(size - (line - 1) - len(key), 0)) if line > 0 else -1
        while at != -1:
            yield size - at - len(key)
            at = reverse.find(key[::-1], at + 1) if size - at - len(key) > 0 else -1


def split_lines(text: str) -> list[str]:
    """``text`` cut as git and the compiler cut it: after each ``\\n`` and nowhere else (``\\r``, ``\\f``, ``\\v``,
    ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029, where ``str.splitlines`` also cuts, stay inside their
    line), each line with its ``\\n`` (the last one may have none)."""
    lines = text.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])
