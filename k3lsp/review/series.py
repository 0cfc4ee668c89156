"""What is under review, as patches: commits of a range, one commit, the index, the work tree, or the mails of a
series applied one after the other.

A :class:`Patch` is what the review needs of any of them: a title (a commit's subject, a mail's ``Subject``), the
files it changed with their hunks (``k3lsp.git.patches.FileChange``), and the files before and after it
(``k3lsp.git.repo.Snapshot``). A mail's patch applies (``k3lsp.git.patches.apply``, in memory) to the files as the
patches before it left them, starting from a base commit; nothing is written to the repository or the disk.
A patch that does not apply says why in ``error`` (and the ones after it, which build on it, too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from k3lsp.git import patches
from k3lsp.git.patches import FileChange
from k3lsp.git.repo import Commit, Delta, Repository, Snapshot
from k3lsp.review.mbox import Mail

Wanted = Callable[[str], bool]  # which paths are worth their hunks (the include/exclude settings)


@dataclass(frozen=True)
class Patch:
    """One patch under review, and where it came from (a commit, or a mail with its thread)."""

    title: str
    files: tuple[FileChange, ...]
    before: Snapshot
    after: Snapshot
    commit: str | None = None
    message_id: str = ""
    references: tuple[str, ...] = ()
    author: str = ""
    date: str = ""
    error: str | None = None  # why it could not be read or applied: nothing of it is reviewed


def commit(repo: Repository, c: Commit, wanted: Wanted) -> Patch:
    """A commit against its first parent."""
    before = repo.tree(repo.commit(c.parents[0]) if c.parents else None)
    after = repo.tree(c)
    files = _files(repo.commit_deltas(c), before, after, wanted)
    return Patch(c.subject, files, before, after, commit=c.id, author=c.author, date=c.date)


def revision(repo: Repository, spec: str, wanted: Wanted) -> tuple[list[Patch], list[str]]:
    """The patches a revision names (every commit of ``A..B``, oldest first, or one commit), and what a reviewer
    should be told of it: the merges a range leaves out, or that it names no commit at all."""
    if ".." not in spec:
        return [commit(repo, repo.commit(spec), wanted)], []
    picked, merges = repo.commits(spec)
    said = [f"merge {c.short} ({c.subject}) left out: a merge is no patch" for c in merges]
    if not (picked or merges):  # A..A, or CI's origin/main..HEAD on main: nothing to review is no failure
        old, _, new = spec.partition("..")
        said.append(f"{spec} names no commit ({new or 'HEAD'} holds none that {old} does not): nothing to review")
    return [commit(repo, c, wanted) for c in picked], said


def staged(repo: Repository, wanted: Wanted) -> Patch:
    head = None if repo.unborn else repo.commit("HEAD")
    before, after = repo.tree(head), repo.index()
    return Patch("the staged changes", _files(repo.staged_deltas(), before, after, wanted), before, after)


def worktree(repo: Repository, base: Commit, wanted: Wanted, what: str) -> Patch:
    before, after = repo.tree(base), repo.worktree()
    title = f"the work tree against {what}"
    return Patch(title, _files(repo.worktree_deltas(base), before, after, wanted), before, after)


def _files(deltas: Sequence[Delta], before: Snapshot, after: Snapshot, wanted: Wanted) -> tuple[FileChange, ...]:
    out = []
    for d in deltas:
        hunks: tuple = ()
        if not d.binary and d.new_path is not None and wanted(d.new_path):
            old = before.read(d.old_path) if d.old_path is not None else b""
            new = after.read(d.new_path)
            if old is not None and new is not None:
                hunks = patches.between(old, new)
        out.append(FileChange(d.old_path, d.new_path, d.binary, hunks))
    return tuple(out)


class Applied:
    """Files as a patch left them: its post-images (None: deleted, renamed away, or binary, which cannot be
    applied here) over the files before it."""

    def __init__(self, base: Snapshot, files: dict[str, bytes | None]):
        self._base, self._files = base, files

    def read(self, path: str) -> bytes | None:
        return self._files[path] if path in self._files else self._base.read(path)


def mails(base: Snapshot, series: Sequence[Mail]) -> list[Patch]:
    """The patches of a series, each applied to the files as the ones before it left them."""
    out: list[Patch] = []
    state = base
    failed: str | None = None  # why an earlier patch did not apply: the later ones build on it
    for mail in series:
        meta = {"message_id": mail.message_id, "references": mail.references, "author": mail.author, "date": mail.date}
        files: tuple[FileChange, ...] = ()
        after, error = state, None
        if failed is not None:
            error = f"not reviewed: an earlier patch of the series did not apply ({failed})"
        else:
            try:
                files, left = _applied(state, patches.parse(mail.diff))
                after = Applied(state, left)
            except patches.PatchError as exc:
                failed = str(exc)
                error = f"not reviewed: {failed}"
        out.append(Patch(mail.subject, files, state, after, error=error, **meta))
        state = after
    return out


def _applied(before: Snapshot, files: Sequence[FileChange]) -> tuple[tuple[FileChange, ...], dict[str, bytes | None]]:
    """The files a mail's diffs leave, as ``git apply`` leaves them, and its changes with one per file.

    Each diff reads what git's does: a diff of a file an earlier diff of the mail wrote applies on top of that
    one's result; a rename or a copy reads its source as it was before the mail ("git patches do not depend on
    the order"); a file deleted or renamed away by an earlier diff cannot be changed again, and a new file cannot
    be where a file is (unless a diff of the mail deletes or renames that one away). Then git writes the results
    in two rounds: it removes every file a diff deletes, renames away or rewrites, and writes every diff's result,
    the last diff of a path winning; so a file a diff changes stays, with that change, when a later diff deletes
    or renames it. A file that several diffs write is one change, from its first diff's source before the mail to
    what it ends as: the lines the review marks as changed are every diff's, not the last one's."""
    view: dict[str, bytes | None] = {}  # each file as the diffs so far left it, as the next diff reads it
    gone: set[str] = set()  # deleted or renamed away by a diff so far
    leaving = {c.old_path for c in files if c.old_path is not None and (c.new_path is None or _renames(c))}
    removed: set[str] = set()  # git's first round
    written: dict[str, bytes | None] = {}  # its second (None: binary, which cannot be applied here)
    firsts: dict[str, FileChange] = {}  # each file written, by its first diff
    for change in files:
        source, target = change.old_path, change.new_path
        for path in (source, target):
            _verify(path)
        state = Applied(before, view)
        if source is None or (target is not None and source != target):
            if target is not None and target not in gone | leaving and state.read(target) is not None:
                raise patches.PatchError(f"{target}: the patch creates it, but the files already have it")
            old = b"" if source is None else before.read(source)
        elif source in gone:
            raise patches.PatchError(f"{source}: the patch changes it after a diff of its own deleted or renamed it")
        else:
            old = state.read(source)
        if old is None:
            raise patches.PatchError(f"{source}: the patch changes it, but the base has no such file")
        if source is not None and not change.copy:
            removed.add(source)
        if source is not None and (target is None or _renames(change)):
            view[source] = None
            gone.add(source)
        if target is None:
            if not change.binary and patches.apply(old, change):
                raise patches.PatchError(f"{source}: the patch deletes it, but leaves some of its lines")
            continue
        view[target] = written[target] = None if change.binary else patches.apply(old, change)
        gone.discard(target)
        firsts.setdefault(target, change)
    final = {**dict.fromkeys(removed), **written}
    return tuple(_one_per_file(before, files, firsts, final)), final


def _verify(path: str | None) -> None:
    """Refuse a path ``git apply`` refuses (its ``verify_path``): absolute, or with an empty, ``.``, ``..`` or
    ``.git`` part (in any case), which would name a file outside the tree or in its git directory."""
    if path is not None and (
        path.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in path.split("/"))
    ):
        raise patches.PatchError(
            f"{path}: git refuses a path that is absolute or has an empty, '.', '..' or '.git' part, so the patch "
            "is not reviewed"
        )


def _renames(change: FileChange) -> bool:
    return not change.copy and change.old_path not in (None, change.new_path) and change.new_path is not None


def _one_per_file(
    before: Snapshot, files: Sequence[FileChange], firsts: dict[str, FileChange], final: dict[str, bytes | None]
) -> list[FileChange]:
    """``files`` with the diffs of a file several diffs write made one (at the place of its first), and without
    the deletion of a file a diff wrote (git wrote it after removing it)."""
    count = Counter(c.new_path for c in files if c.new_path is not None)
    merged: list[FileChange] = []
    for change in files:
        target = change.new_path
        if target is None:
            if change.old_path not in firsts:
                merged.append(change)
        elif count[target] == 1:
            merged.append(change)
        elif firsts[target] is change:
            source, new = change.old_path, final[target]
            old = before.read(source) if source is not None else b""
            hunks = patches.between(old, new) if old is not None and new is not None else ()
            merged.append(FileChange(source, target, new is None, hunks, change.copy))
    return merged
