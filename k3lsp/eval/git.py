"""The repository under evaluation, read with `git` so that none of its code or configuration runs.

The repository is untrusted: its ``.git/config`` (and the files it includes) and ``.gitattributes`` can name
programs git would run on our behalf: ``core.fsmonitor`` (on any index refresh), ``core.pager`` and
``pager.*``, ``diff.external`` and ``diff.<driver>.command``, ``diff.<driver>.textconv``, ``log.showSignature``
with ``gpg.program``, hooks. So every call here:

- reads objects only, by revision (never the work tree or the index: nothing refreshes it), with plumbing where
  there is one (``diff-tree``, ``cat-file``) and ``--no-ext-diff --no-textconv`` wherever a diff is made;
- overrides, on the command line (which wins over every config file), every key that could run something for
  the commands used: ``core.fsmonitor``, ``core.hooksPath``, ``core.pager``, ``log.showSignature``,
  ``diff.external``; and ``protocol.allow=never``: in a partial clone a blob it lacks is fetched when read,
  through the repository's own remote and ``core.sshCommand`` (``GIT_NO_LAZY_FETCH`` stops that fetch too, on
  git 2.44 and later), so no transport may start;
- reads no file the config names outside the repository: ``mailmap.file`` and ``core.attributesFile`` are
  emptied on the command line (``/dev/zero`` held ``log``, ``blame`` and ``diff-tree`` until the timeout), and
  ``blame.ignoreRevsFile``, a list no override empties, must name a file of the work tree (git quoted the first
  line of one outside in its error, which became the case's reason in the report);
- runs with no pager, no terminal prompt, no optional locks, and none of the caller's ``GIT_*`` variables (they
  could point git at another repository, an external diff or a config of their own);
- runs on the git directory ``k3lsp.git.repo.locate`` finds, as a bare repository (``--git-dir DIR --bare``), the
  same one the review opens: a ``.git`` file naming another repository, or objects borrowed from outside it
  (``objects/info/alternates``), are refused before git starts, and no ``core.worktree`` gives git a work tree.

``safe.directory`` is git's own: a repository another user owns is refused as git refuses it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from k3lsp.git import repo as gitrepo

TIMEOUT = 300.0  # seconds one git command may take (a blame of a large file on a long history)
_OVERRIDES = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.quotePath=false",
    "log.showSignature=false",
    "diff.external=",
    "protocol.allow=never",  # no transport at all: a partial clone's lazy fetch would run core.sshCommand & co.
    "mailmap.file=",  # files the config names, read by log and blame, and by diff-tree: /dev/zero holds them
    "core.attributesFile=",
)
_IGNORE_REVS = "blame.ignoreRevsFile"  # a list: no -c empties it, so blame checks where its files are
_HEX = re.compile(r"[0-9a-fA-F]{4,64}")


class GitError(RuntimeError):
    """A git command failed; the message has git's own words."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    quiet = {"GIT_PAGER": "cat", "PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    return env | quiet | {"GIT_NO_LAZY_FETCH": "1"}  # git 2.44+: a missing object is an error, never a fetch


def _located(repo: Path) -> gitrepo.Location:
    try:
        return gitrepo.locate(repo)
    except gitrepo.GitError as exc:
        raise GitError(str(exc)) from None


def run(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """``git --git-dir <REPO's> --bare <overrides> ARGS`` in its work tree (where the config's relative paths
    are), or its git directory: its stdout; GitError when it fails."""
    where = _located(repo)
    cmd = ["git", "--git-dir", str(where.gitdir), "--bare", "--no-pager"]
    for override in _OVERRIDES:
        cmd += ["-c", override]
    cwd = where.worktree or where.gitdir
    try:
        done = subprocess.run(
            [*cmd, *args], input=stdin, capture_output=True, cwd=cwd, env=_env(), timeout=TIMEOUT, check=False
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed (it is on PATH nowhere)") from exc
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"git {args[0]} took over {TIMEOUT:.0f} s") from exc
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {args[0]}: {why[-1] if why else f'exit status {done.returncode}'}")
    return done.stdout


def check_revision(rev: str) -> str:
    """A commit name from a list file: hex only, so it can never be read as an option."""
    if not _HEX.fullmatch(rev):
        raise GitError(f"{rev!r} is not a commit id (hex digits)")
    return rev


def commits(repo: Path, revs: Sequence[str], *, grep: str | None = None, walk: bool = True) -> list[tuple]:
    """(sha, parents, message) of each commit: ``revs`` walked as ``git log`` walks them (a range), or with
    ``walk`` false exactly those commits in the order given; ``grep`` keeps those whose message matches
    (an extended regex, case-insensitive)."""
    if not revs:
        return []  # git log without a revision would walk HEAD
    args = ["log", "-z", "--format=%H%x1f%P%x1f%B"]
    if grep is not None:
        args += ["-E", "-i", f"--grep={grep}"]
    if not walk:
        args.append("--no-walk=unsorted")
    out = run(repo, *args, "--stdin", stdin="".join(f"{r}\n" for r in revs).encode())
    records = []
    for record in out.decode("utf-8", "replace").split("\0"):
        if record.strip():
            sha, parents, message = record.split("\x1f", 2)
            records.append((sha.strip(), tuple(parents.split()), message))
    return records


def resolve(repo: Path, names: Sequence[str]) -> dict[str, str | None]:
    """Each short commit id -> the full id of the one commit it names, or None (missing, ambiguous or not a
    commit): one ``cat-file`` for all of them."""
    unique = list(dict.fromkeys(names))
    if not unique:
        return {}
    query = "".join(f"{check_revision(n)}^{{commit}}\n" for n in unique).encode()
    lines = run(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)", stdin=query).decode().splitlines()
    out: dict[str, str | None] = {}
    for name, line in zip(unique, lines, strict=True):
        sha, _, kind = line.partition(" ")
        out[name] = sha if kind == "commit" else None
    return out


def touched_files(repo: Path, commit: str) -> list[str]:
    """The paths a (non-merge) commit adds, changes or removes, against its parent (or the empty tree)."""
    out = run(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", "-z", "--no-renames", commit)
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def patch(repo: Path, old: str, new: str) -> str:
    """The diff from ``old`` to ``new`` with no context lines (renames found), as text."""
    out = run(repo, "diff-tree", "-p", "-U0", "-M", "-r", "--no-ext-diff", "--no-textconv", old, new)
    return out.decode("utf-8", "surrogateescape")


def blob_lines(repo: Path, commit: str, path: str) -> int:
    """How many lines a file has in a commit."""
    data = run(repo, "cat-file", "blob", f"{commit}:{path}")
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def blame(repo: Path, commit: str, path: str, lines: Sequence[int]) -> dict[int, tuple[str, str, int]]:
    """For each line of ``path`` in ``commit``: (the commit that last changed it, its path there, its line
    there). Whitespace-only changes are looked through (``-w``): a later re-indent does not hide the commit
    that wrote the line."""
    wanted = sorted(set(lines))
    if not wanted:
        return {}
    _check_ignore_revs(repo)
    args = ["blame", "--line-porcelain", "-w", "--no-textconv"]
    for start, end in _runs(wanted):
        args += ["-L", f"{start},{end}"]
    text = run(repo, *args, commit, "--", path).decode("utf-8", "surrogateescape")
    out: dict[int, tuple[str, str, int]] = {}
    sha, orig, final, name = "", 0, 0, path
    for line in text.split("\n"):
        if line.startswith("\t"):
            out[final] = (sha, name, orig)
            continue
        head = line.split(" ")
        if len(head) >= 3 and len(head[0]) >= 40 and _HEX.fullmatch(head[0]):
            sha, orig, final, name = head[0], int(head[1]), int(head[2]), path
        elif line.startswith("filename "):
            name = line[len("filename ") :]
    return out


def _check_ignore_revs(repo: Path) -> None:
    """Refuse a ``blame.ignoreRevsFile`` outside the repository: git reads it (its first bad line came back in
    git's error, and /dev/zero never ends). One in the work tree (``.git-blame-ignore-revs``) is honoured."""
    where = _located(repo)
    base = where.worktree or where.gitdir
    try:
        named = gitrepo.Repository(repo).config_values(_IGNORE_REVS)
    except gitrepo.GitError as exc:
        raise GitError(str(exc)) from None
    for value in filter(None, named):  # "" empties the list
        relative = not value.startswith(("/", "~", "%("))  # git expands ~ and %(prefix)
        if not (relative and (base / value).resolve().is_relative_to(base)):
            raise GitError(
                f"the repository's config names {_IGNORE_REVS} {value!r}, outside the repository, and eval reads no "
                f"file outside it: name a file of the work tree, or remove it (git config --unset-all {_IGNORE_REVS})"
            )


def _runs(numbers: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted line numbers as (start, end) runs: one ``-L`` each."""
    out: list[tuple[int, int]] = []
    for n in numbers:
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out
