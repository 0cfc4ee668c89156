"""Where a fix says the bug was: the lines of the introducing commit I that the fix commit F changed or removed.

The lines F changed are lines of F's parent; which of them I wrote, and where they stood in I, is what ``git
blame`` of F's parent says (``-w``: a re-indent in between does not hide the author). So edits between I and F
(lines added above, other lines changed) do not confuse it: every bug line is given as I's own file and line,
the coordinates of I's review. A fix that only adds lines (a missing check, a missing unlock) changes none of
I's lines; its bug lines are then the lines of I next to where it adds them: the line before each insertion and
the line after it, where I wrote them. Lines F changes that I did not write are not I's bug: a case none of whose
lines I wrote is passed over, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import unidiff

from k3lsp.eval import git
from k3lsp.eval.history import Case


@dataclass(frozen=True, order=True)
class BugLine:
    path: str  # the file in I, `/` separated, relative to the repository
    line: int  # 1-based line of that file in I


@dataclass(frozen=True)
class Bug:
    case: Case
    lines: tuple[BugLine, ...]
    add_only: bool  # F only adds lines: these are I's lines next to the additions


@dataclass(frozen=True)
class Edits:
    """What a fix does to one file of its parent: lines it removes or changes, places it inserts after."""

    path: str  # in F's parent
    removed: tuple[int, ...]
    inserted_after: tuple[int, ...]  # 0: before the first line


def edits(diff: str, wants: Callable[[str], bool]) -> list[Edits]:
    """The edits of a ``-U0`` diff to the files ``wants`` admits (binary and new files have no old lines)."""
    out = []
    for f in unidiff.PatchSet(diff):
        if f.is_binary_file or f.is_added_file:
            continue
        path = f.source_file[2:] if f.source_file.startswith("a/") else f.source_file
        if not wants(path):
            continue
        removed = tuple(line.source_line_no for hunk in f for line in hunk if line.is_removed)
        inserted = tuple(hunk.source_start for hunk in f if hunk.source_length == 0)
        out.append(Edits(path, removed, inserted))
    return out


def locate(repo: Path, case: Case, wants: Callable[[str], bool]) -> Bug | str:
    """The case's bug lines, or why it has none to judge a review by."""
    parent = f"{case.fix}^"
    try:
        changes = edits(git.patch(repo, parent, case.fix), wants)
    except unidiff.UnidiffParseError as exc:
        return f"the fix's diff could not be read ({exc})"
    if not changes:
        return "the fix changes no C"
    add_only = not any(e.removed for e in changes)
    lines: set[BugLine] = set()
    for e in changes:
        if add_only:
            length = git.blob_lines(repo, parent, e.path)
            wanted = {n for k in e.inserted_after for n in (k, k + 1) if 1 <= n <= length}
        else:
            wanted = set(e.removed)
        for sha, path, line in git.blame(repo, parent, e.path, sorted(wanted)).values():
            if sha == case.introducing:
                lines.add(BugLine(path, line))
    if not lines:
        where = "next to what the fix adds" if add_only else "that the fix changes"
        return f"the introducing commit wrote no line {where}"
    return Bug(case, tuple(sorted(lines)), add_only)
