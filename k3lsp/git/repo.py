"""Reading a git repository that may be hostile: its commits, trees, index and work tree, running none of its code.

The repository under review is untrusted input. Its config and attributes can name programs that ``git`` runs
while it reads: hooks, ``core.fsmonitor``, ``diff.external``, textconv drivers, clean and smudge filters,
``core.pager``. So nothing here runs ``git``: the repository is read through libgit2 (pygit2), which runs no
external program at all (it has no hooks, no fsmonitor, no external diff, no textconv, and runs no filter
driver: only filters registered in-process, and we register none). On top of that:

- **whose repository**: libgit2's owner check stays on, so a repository another user owns is refused unless the
  user's own git config lists it in ``safe.directory``, as git does;
- **which work tree**: the folder that holds ``.git``, as :func:`locate` finds it from the path given, never a
  place the repository's own files name: its ``core.worktree`` is ignored (it would root the model's tools at
  any ancestor), a git directory given itself has none unless it is named ``.git`` (a bare repository has
  none even with ``core.bare = false``, which would make its parent folder the work tree), ``core.bare = true``
  leaves none, and ``GIT_DIR``/``GIT_WORK_TREE`` are not read (libgit2 reads them only when asked to). A ``.git``
  *file* (or symlink) is followed only to a git directory that names this folder back as its work tree, as
  git's own linked work trees (``worktrees/<name>/gitdir``) and submodules (``core.worktree`` of
  ``modules/<name>``) do; one naming another repository is refused;
- **which objects**: a repository that borrows objects from outside its git directory
  (``objects/info/alternates``, as ``git clone --shared`` or ``--reference`` leave) is refused, so no object
  the repository does not hold is reviewed; ``git repack -a -d`` and removing the file make it whole;
- **which files**: a tree's blobs are read only for regular files (never a symlink's target text or a
  submodule), at most ``max_bytes`` each; a work-tree file only through the model's own confinement
  (``k3lsp.tools.confine``: inside the work tree, no symlink out, no hidden or secret place);
- **which diff**: the files a change touched (and its renames) come from libgit2's tree diff; the lines come
  from a diff of the two blobs' bytes with no path attached (``k3lsp.git.patches.between``), so no attribute of
  the repository picks a diff driver, whose ``xfuncname`` pattern could be made to backtrack for minutes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Protocol

import pygit2
from pygit2.enums import DeltaStatus, DiffOption, FileMode, RepositoryOpenFlag, SortMode

from k3lsp.tools import confine
from k3lsp.wire import supplied

DEFAULT_MAX_BYTES = 1_000_000  # as the maxFileBytes setting
_REGULAR = (FileMode.BLOB, FileMode.BLOB_EXECUTABLE)
_WORKDIR_FLAGS = DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
_SMALL_BYTES = 65_536  # read of a .git file, commondir or alternates: a path or a few


class GitError(Exception):
    """The repository cannot be read as asked: not a repository, refused, or no such revision."""


class Snapshot(Protocol):
    """A state of the files: a commit's tree, the index, the work tree, or one of those with patches applied."""

    def read(self, path: str) -> bytes | None:
        """The bytes of a file, or None when it is absent, not a regular file, unreadable or too large."""
        ...


@dataclass(frozen=True)
class Commit:
    """One commit, as a review names it."""

    id: str
    subject: str
    message: str
    author: str  # "Name <email>"
    date: str  # RFC 2822, as a mail header
    parents: tuple[str, ...]

    @property
    def short(self) -> str:
        return self.id[:12]


@dataclass(frozen=True)
class Delta:
    """One file a change touched: its path before and after (None: added or deleted), and whether git sees
    binary content in it."""

    old_path: str | None
    new_path: str | None
    binary: bool


@dataclass(frozen=True)
class Base:
    """The commit a work tree is compared with, and how it was chosen (for the editor's status)."""

    commit: Commit
    label: str


@dataclass(frozen=True)
class Location:
    """Where a repository is, as we decide it: its git directory, and the folder holding its ``.git`` (None:
    a git directory given itself, or ``core.bare``)."""

    gitdir: Path
    worktree: Path | None


def locate(path: str | Path) -> Location:
    """The repository holding ``path``: the nearest folder, from ``path`` up, that is a git directory itself or
    holds a ``.git``, checked as the module says. Reads no environment variable and no ``core.worktree``."""
    try:
        start = Path(path).resolve(strict=True)
    except OSError as exc:
        raise GitError(f"{path}: cannot read it ({exc.strerror})") from None
    for folder in (start, *start.parents) if start.is_dir() else start.parents:
        dotgit = folder / ".git"
        if _is_gitdir(folder):
            worktree = folder.parent if folder.name == ".git" and not _open(folder).is_bare else None
            where = Location(folder, worktree)
        elif dotgit.is_dir() and not dotgit.is_symlink():
            where = Location(dotgit, None if _open(dotgit).is_bare else folder)
        elif dotgit.is_symlink() or dotgit.exists():
            where = _linked(folder, dotgit)
        else:
            continue
        _self_contained(where.gitdir)
        return where
    raise GitError(f"{path}: not inside a git repository")


def _is_gitdir(folder: Path) -> bool:
    """What libgit2 takes for a git directory: a HEAD, and objects of its own or a common directory's."""
    return (folder / "HEAD").is_file() and ((folder / "objects").is_dir() or (folder / "commondir").is_file())


def _open(gitdir: Path, bare: bool = False) -> pygit2.Repository:
    """The git directory itself, no search and no ``.git`` appended (``bare``: no work tree, whatever it says)."""
    flags = RepositoryOpenFlag.NO_SEARCH | RepositoryOpenFlag.NO_DOTGIT | (RepositoryOpenFlag.BARE if bare else 0)
    try:
        return pygit2.Repository(str(gitdir), flags)
    except pygit2.GitError as exc:  # the owner check among them: "repository path ... is not owned by current user"
        raise GitError(f"{gitdir}: cannot open the repository: {exc}") from None


def _linked(folder: Path, dotgit: Path) -> Location:
    """A ``.git`` file (``gitdir: PATH``) or symlink: its git directory, when that names ``folder`` back."""
    if dotgit.is_symlink():
        target = dotgit.resolve()
    else:
        head = _small_text(dotgit)
        if not head.startswith("gitdir:"):
            raise GitError(f"{dotgit}: a .git file must say 'gitdir: PATH'; it does not, so this is no repository")
        target = (folder / head[len("gitdir:") :].strip()).resolve()
    if not _is_gitdir(target):
        raise GitError(f"{dotgit} points to {target}, which is no git directory")
    own = _open(target).workdir
    if own is None or Path(own).resolve() != folder:
        raise GitError(
            f"{dotgit} points to {target}, a git directory whose own work tree is {own or 'none (bare)'}, not "
            f"{folder}; refused, since reviewing it would read another repository: run k3lsp in that one"
        )
    return Location(target, folder)


def _self_contained(gitdir: Path) -> None:
    """Refuse a repository whose objects are partly another's (``objects/info/alternates`` outside it)."""
    common = gitdir
    if os.path.lexists(gitdir / "commondir"):  # a linked work tree: its objects are the main git directory's
        common = (gitdir / _small_text(gitdir / "commondir").strip()).resolve()
    alternates = common / "objects" / "info" / "alternates"
    if not os.path.lexists(alternates):
        return
    for line in (n.strip() for n in _small_text(alternates).splitlines()):
        if line and not line.startswith("#") and not (common / "objects" / line).resolve().is_relative_to(common):
            raise GitError(
                f"{common}: it borrows objects from {line} ({alternates}); refused, since a review would read code "
                "the repository does not hold: make it whole with 'git repack -a -d' and delete that file"
            )


def _small_text(path: Path) -> str:
    """A small file git keeps (a ``.git`` file, ``commondir``, ``alternates``), whole, as git reads it: a regular
    file only (a FIFO would block), ``_SMALL_BYTES`` at most (past that refused, not cut: a line after the part
    read would go unchecked)."""
    try:
        return supplied.read(path, _SMALL_BYTES).decode("utf-8", "replace")
    except supplied.Refused as exc:
        raise GitError(f"{path}: {exc}; this is no repository git made") from None
    except OSError as exc:
        raise GitError(f"{path}: cannot read it ({exc.strerror})") from None


class Repository:
    """One repository, opened once where :func:`locate` finds it; every method raises GitError only."""

    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        where = locate(path)
        self._repo = _open(where.gitdir, bare=where.worktree is None)
        if where.worktree is not None:
            self._repo.workdir = str(where.worktree)  # over core.worktree; the config file is left as it is
        self.workdir = where.worktree

    def config_values(self, key: str) -> list[str]:
        """Every value of a (multi-valued) key, from every config file git would read for this repository."""
        try:
            return list(self._repo.config.get_multivar(key))
        except pygit2.GitError as exc:
            raise GitError(f"{self.root}: its config cannot be read ({exc})") from None

    @property
    def unborn(self) -> bool:
        """HEAD names a branch with no commit yet (a new repository)."""
        return self._repo.head_is_unborn

    @property
    def root(self) -> Path:
        """Where findings' paths are relative to: the work tree, or the git directory of a bare repository."""
        return self.workdir or Path(self._repo.path).resolve()

    # --- revisions ---------------------------------------------------------------------------------------

    def commit(self, rev: str) -> Commit:
        return _commit(self._peel(rev))

    def commits(self, spec: str) -> tuple[list[Commit], list[Commit]]:
        """The commits of ``A..B`` (``B`` defaults to HEAD), oldest first: (commits, merges left out: a merge is
        no patch)."""
        old, dots, new = spec.partition("..")
        if not dots or not old:
            raise GitError(f"{spec}: a range is A..B")
        if new.startswith("."):
            raise GitError(f"{spec}: A...B (symmetric difference) is not a review range; use A..B")
        head, start = self._peel(new or "HEAD"), self._peel(old)
        walker = self._repo.walk(head.id, SortMode.TOPOLOGICAL | SortMode.REVERSE)
        walker.hide(start.id)
        picked, merges = [], []
        for commit in walker:
            (merges if len(commit.parents) > 1 else picked).append(_commit(commit))
        if not (picked or merges) and head.id != start.id and self._repo.descendant_of(start.id, head.id):
            newer = new or "HEAD"
            raise GitError(
                f"{spec} names no commit: {newer} is an ancestor of {old}, and a range runs from the older commit "
                f"to the newer; did you mean {newer}..{old}?"
            )
        return picked, merges

    def history(self, rev: str, limit: int) -> list[Commit]:
        """Up to ``limit`` commits reachable from ``rev``, newest first, merges left out."""
        out: list[Commit] = []
        for c in self._repo.walk(self._peel(rev).id, SortMode.TOPOLOGICAL):
            if len(out) == limit:
                break
            if len(c.parents) <= 1:
                out.append(_commit(c))
        return out

    def _peel(self, rev: str) -> pygit2.Commit:
        try:
            return self._repo.revparse_single(rev).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as exc:
            raise GitError(f"{rev!r} is not a commit of the repository ({exc})") from None

    def base(self, ref: str = "") -> Base:
        """The commit ``ref`` names; with none, the merge-base of HEAD with its branch's upstream (what the
        branch changed), else HEAD itself."""
        if ref:
            return Base(self.commit(ref), ref)
        head = self._peel("HEAD")
        try:
            branch = self._repo.branches.local.get(self._repo.head.shorthand)
            upstream = branch.upstream if branch is not None else None
        except (pygit2.GitError, KeyError, ValueError):
            upstream = None
        if upstream is not None:
            base = self._repo.merge_base(head.id, upstream.peel(pygit2.Commit).id)
            if base is not None:
                commit = _commit(self._repo[base])
                return Base(commit, f"merge-base with {upstream.shorthand} ({commit.short})")
        commit = _commit(head)
        return Base(commit, f"HEAD ({commit.short}; the branch has no upstream)")

    # --- snapshots and deltas ----------------------------------------------------------------------------

    def tree(self, commit: Commit | None) -> BlobSnapshot:
        """The files of a commit (None: no files, the parent of a root commit)."""
        return BlobSnapshot(self, None if commit is None else self._repo[commit.id].tree)

    def index(self) -> BlobSnapshot:
        return BlobSnapshot(self, self._repo.index)

    def worktree(self) -> WorktreeSnapshot:
        if self.workdir is None:
            raise GitError(f"{self.root} is a bare repository: it has no work tree")
        return WorktreeSnapshot(self.workdir, self.max_bytes)

    def commit_deltas(self, commit: Commit) -> list[Delta]:
        """What a commit changed against its first parent (a root commit: against nothing)."""
        new = self._repo[commit.id].tree
        if not commit.parents:
            return _deltas(new.diff_to_tree(swap=True))
        return _deltas(self._repo[commit.parents[0]].tree.diff_to_tree(new))

    def staged_deltas(self) -> list[Delta]:
        """The index against HEAD (everything staged, in an unborn branch)."""
        tree = self._head_tree()
        return _deltas(self._repo.index.diff_to_tree(tree) if tree is not None else self._repo.index.diff_to_tree())

    def worktree_deltas(self, base: Commit) -> list[Delta]:
        """The work tree (untracked files included, ignored ones not) against ``base``."""
        return _deltas(self._repo[base.id].tree.diff_to_workdir(_WORKDIR_FLAGS))

    def _head_tree(self) -> pygit2.Tree | None:
        return None if self.unborn else self._repo.head.peel(pygit2.Commit).tree

    def blob(self, oid: pygit2.Oid, mode: int) -> bytes | None:
        if mode not in _REGULAR:
            return None
        obj = self._repo.get(oid)
        if not isinstance(obj, pygit2.Blob) or obj.size > self.max_bytes:
            return None
        return obj.data


def _commit(c: pygit2.Commit) -> Commit:
    return Commit(
        id=str(c.id),
        subject=c.message.split("\n", 1)[0].strip(),
        message=c.message,
        author=f"{c.author.name} <{c.author.email}>",
        date=formatdate(c.author.time),
        parents=tuple(str(p) for p in c.parent_ids),
    )


def _deltas(diff: pygit2.Diff) -> list[Delta]:
    """The files of a libgit2 diff, renames found (``find_similar``: as ``git diff -M``)."""
    diff.find_similar()
    out = []
    for d in diff.deltas:
        if d.status in (DeltaStatus.UNMODIFIED, DeltaStatus.IGNORED):
            continue
        old = None if d.status in (DeltaStatus.ADDED, DeltaStatus.UNTRACKED) else d.old_file.path
        new = None if d.status == DeltaStatus.DELETED else d.new_file.path
        out.append(Delta(old, new, d.is_binary))
    return out


class BlobSnapshot:
    """The files of a commit's tree or of the index, by path: their blobs, read through the repository's own
    checks (regular files only, bounded). ``entries`` is a pygit2 Tree or Index (None: an empty tree)."""

    def __init__(self, repo: Repository, entries: pygit2.Tree | pygit2.Index | None):
        self._repo, self._entries = repo, entries

    def read(self, path: str) -> bytes | None:
        if self._entries is None:
            return None
        try:
            entry = self._entries[path]
        except (KeyError, ValueError):
            return None
        mode = entry.filemode if isinstance(entry, pygit2.Object) else entry.mode  # a tree entry, or an index one
        return self._repo.blob(entry.id, mode)


class WorktreeSnapshot:
    """Work-tree files as the model's tools may read them (``k3lsp.tools.confine``), at most ``max_bytes`` each."""

    def __init__(self, root: Path, max_bytes: int):
        self.root, self._max = root, max_bytes

    def read(self, path: str) -> bytes | None:
        try:
            data = confine.read_bytes(confine.resolve(self.root, path), path)
        except (confine.ToolError, OSError):
            return None
        return data if len(data) <= self._max else None
