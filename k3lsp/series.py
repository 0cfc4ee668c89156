"""What is under review, as patches: commits of a range, one commit, the index, the work tree, or the mails of a
series applied one after the other.

A :class:`Patch` is what the review needs of any of them: a title (a commit's subject, a mail's ``Subject``), the
files it changed with their hunks (``k3lsp.patches.FileChange``), and the files before and after it
(``k3lsp.gitrepo.Snapshot``). A mail's patch applies (``k3lsp.patches.apply``, in memory) to the files as the
patches before it left them, starting from a base commit; nothing is written to the repository or the disk.
A patch that does not apply says why in ``error`` (and the ones after it, which build on it, too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from k3lsp import patches
from k3lsp.gitrepo import Commit, Delta, Repository, Snapshot
from k3lsp.mbox import Mail
from k3lsp.patches import FileChange

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


def commit_range(repo: Repository, spec: str, wanted: Wanted) -> tuple[list[Patch], list[Commit]]:
    """Every commit of ``A..B``, oldest first, and the merges left out."""
    picked, merges = repo.commits(spec)
    return [commit(repo, c, wanted) for c in picked], merges


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
                files = tuple(patches.parse(mail.diff))
                after = Applied(state, _applied(state, files))
            except patches.PatchError as exc:
                failed = str(exc)
                error = f"not reviewed: {failed}"
        out.append(Patch(mail.subject, files, state, after, error=error, **meta))
        state = after
    return out


def _applied(before: Snapshot, files: Sequence[FileChange]) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for change in files:
        if change.old_path is not None and change.old_path != change.new_path:
            out[change.old_path] = None
        if change.new_path is None:
            continue
        if change.binary:
            out[change.new_path] = None
            continue
        old = b"" if change.old_path is None else before.read(change.old_path)
        if old is None:
            raise patches.PatchError(f"{change.old_path}: the patch changes it, but the base has no such file")
        out[change.new_path] = patches.apply(old, change)
    return out
