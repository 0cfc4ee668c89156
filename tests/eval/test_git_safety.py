"""A hostile repository runs nothing while `k3lsp eval fixes` reads its history.

The repository's config and `.gitattributes` name a program for every hook git offers a reading command:
``core.fsmonitor``, ``diff.external``, a diff driver's ``command`` and ``textconv``, a filter's ``clean`` and
``smudge``, ``log.showSignature`` with ``gpg.program`` (on a commit that carries a signature), ``core.pager``,
hooks. Each program leaves a mark. Plain git, run the ordinary way on the same repository, leaves marks (the traps
are armed); the eval's selection, sampling and blame leave none. A partial clone (no blobs) whose promisor remote
is reached through its own `core.sshCommand`: plain git runs that program to fetch a missing blob, the eval never.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from k3lsp.core.options import Options
from k3lsp.eval import bugs, history
from k3lsp.git import repo as gitrepo
from tests.eval import history_repo as hr

TRAPS = ("fsmonitor", "external", "command", "textconv", "clean", "smudge", "gpg", "pager", "hook")


def _trap(directory: Path, name: str, marks: Path) -> str:
    script = directory / f"{name}.sh"
    # textconv prints the file it is given (so a diff still has text); every trap leaves its mark
    script.write_text(f'#!/bin/sh\ntouch "{marks}/{name}"\n[ -f "$1" ] && cat "$1"\nexit 0\n')
    script.chmod(0o755)
    return str(script)


def _signed(repo: Path, commit: str) -> str:
    """``commit`` again with a (bogus) signature header: `log --show-signature` hands it to gpg.program."""
    raw = hr.git(repo, "cat-file", "commit", commit).split("\n")
    cut = next(i for i, line in enumerate(raw) if line.startswith("committer "))
    sig = ["gpgsig -----BEGIN PGP SIGNATURE-----", " ", " iQEzBAABCAAdFiEE", " -----END PGP SIGNATURE-----"]
    body = "\n".join(raw[: cut + 1] + sig + raw[cut + 1 :]) + "\n"
    done = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "-t", "commit", "--stdin"],
        input=body, capture_output=True, text=True, check=True, env=os.environ | hr.ENV,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def hostile(tmp_path) -> tuple[Path, Path, hr.History]:
    h = hr.build(tmp_path)
    repo, marks, tools = h.repo, tmp_path / "marks", tmp_path / "tools"
    hr.git(repo, "replace", "--force", h.put_fix, _signed(repo, h.put_fix))  # every reader sees it signed
    marks.mkdir()
    tools.mkdir()
    hooks = tools / "hooks"
    hooks.mkdir()
    for hook in ("post-checkout", "post-merge", "pre-commit", "post-rewrite", "reference-transaction"):
        Path(_trap(hooks, "hook", marks)).rename(hooks / hook)
    settings = {
        "core.fsmonitor": _trap(tools, "fsmonitor", marks),
        "core.pager": _trap(tools, "pager", marks),
        "core.hooksPath": str(hooks),
        "diff.external": _trap(tools, "external", marks),
        "diff.evil.command": _trap(tools, "command", marks),
        "diff.evil.textconv": _trap(tools, "textconv", marks),
        "filter.evil.clean": _trap(tools, "clean", marks),
        "filter.evil.smudge": _trap(tools, "smudge", marks),
        "log.showSignature": "true",
        "gpg.program": _trap(tools, "gpg", marks),
    }
    for key, value in settings.items():
        hr.git(repo, "config", key, value)
    attributes = "* filter=evil\n*.c diff=evil\n"  # C through the diff driver, the rest through diff.external
    (repo / ".git" / "info" / "attributes").write_text(attributes)
    (repo / ".gitattributes").write_text(attributes)
    return repo, marks, h


def _plain_git(repo: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | hr.ENV
    subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env, check=False, timeout=60)


def test_plain_git_springs_the_traps(hostile):
    repo, marks, h = hostile
    _plain_git(repo, "log", "-p", "-2", h.put_fix)
    _plain_git(repo, "diff", f"{h.put_fix}^", h.put_fix)
    _plain_git(repo, "diff", f"{h.docs_fix}^", h.docs_fix)
    _plain_git(repo, "status")
    (repo / "net" / "core" / "buf.c").write_text("changed\n")
    _plain_git(repo, "add", "net/core/buf.c")
    sprung = {p.name for p in marks.iterdir()}
    assert {"fsmonitor", "external", "command", "textconv", "gpg", "clean"} <= sprung, sprung


def test_selecting_sampling_and_blaming_run_nothing_of_the_repository(hostile):
    repo, marks, h = hostile
    wants = Options().wants
    selection = history.sample(repo, history.candidates(repo, ["HEAD"]), None, 0, wants)
    assert {c.introducing for c in selection.cases} == {h.put_bug, h.name_bug, h.count_bug}
    listed = history.candidates(repo, [h.put_fix, h.name_fix], listed=True)
    located = [bugs.locate(repo, case, wants) for case in [*selection.cases, *listed.cases]]
    assert all(isinstance(b, bugs.Bug) for b in located), located
    assert sorted(p.name for p in marks.iterdir()) == []


@pytest.fixture(params=["bare", "work tree"])
def partial(request, tmp_path) -> tuple[Path, Path, hr.History]:
    """A partial clone of the history (no blobs: `--filter=blob:none`) whose promisor remote is reached through the
    repository's own `core.sshCommand`: reading a missing blob makes git fetch it lazily, running that program."""
    h = hr.build(tmp_path)
    hr.git(h.repo, "config", "uploadpack.allowFilter", "true")
    clone, marks, tools = tmp_path / "partial", tmp_path / "marks", tmp_path / "tools"
    bare = ["--bare"] if request.param == "bare" else ["--no-checkout"]
    hr.git(tmp_path, "clone", "-q", *bare, "--filter=blob:none", f"file://{h.repo}", str(clone))
    marks.mkdir()
    tools.mkdir()
    hr.git(clone, "config", "remote.origin.url", "ssh://example.invalid/repo")
    hr.git(clone, "config", "core.sshCommand", _trap(tools, "ssh", marks))
    return clone, marks, h


def test_plain_git_fetches_a_missing_blob_through_the_repositorys_ssh_command(partial):
    clone, marks, h = partial
    _plain_git(clone, "cat-file", "-p", f"{h.put_fix}:net/core/buf.c")
    assert sorted(p.name for p in marks.iterdir()) == ["ssh"]


def test_a_partial_clone_fetches_nothing(partial):
    """The selection needs no blob; the bug lines do, and git says they are missing instead of fetching them."""
    clone, marks, h = partial
    wants = Options().wants
    selection = history.sample(clone, history.candidates(clone, ["HEAD"]), None, 0, wants)
    assert {c.introducing for c in selection.cases} == {h.put_bug, h.name_bug, h.count_bug}
    for case in selection.cases:
        with pytest.raises(history.git.GitError):
            bugs.locate(clone, case, wants)
    repo = gitrepo.Repository(clone)  # the review's libgit2 fetches nothing either: the blob is not there
    assert repo.tree(repo.commit(h.put_fix)).read("net/core/buf.c") is None
    assert sorted(p.name for p in marks.iterdir()) == []


SECRET = "K3TOKEN-a-file-beside-the-repository"


@pytest.mark.parametrize(
    "key, value",
    [
        ("blame.ignoreRevsFile", "SECRET"),  # git quoted its first line: "invalid object name: K3TOKEN..."
        ("blame.ignoreRevsFile", "/dev/zero"),  # read for ever
        ("mailmap.file", "/dev/zero"),  # blame and log
        ("core.attributesFile", "/dev/zero"),  # the fix's diff
    ],
)
def test_files_the_config_names_outside_the_repository_are_not_read(tmp_path, monkeypatch, key, value):
    """A file the repository's config names is read by git for `blame`, `log` or `diff-tree`: outside the
    repository its line reached the report (the case's reason), and an endless one held every case until git's
    timeout (bounded here to 20 s, so the old code fails fast)."""
    monkeypatch.setattr(history.git, "TIMEOUT", 20.0)
    h = hr.build(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{SECRET}\n")
    hr.git(h.repo, "config", key, str(secret) if value == "SECRET" else value)
    wants = Options().wants
    selection = history.sample(h.repo, history.candidates(h.repo, ["HEAD"]), None, 0, wants)
    assert {c.introducing for c in selection.cases} == {h.put_bug, h.name_bug, h.count_bug}
    for case in selection.cases:
        try:
            found = bugs.locate(h.repo, case, wants)
        except history.git.GitError as exc:
            assert key == "blame.ignoreRevsFile" and "outside the repository" in str(exc), exc
            assert SECRET not in str(exc)
        else:
            assert key != "blame.ignoreRevsFile" and isinstance(found, bugs.Bug), found


def test_an_ignore_revs_file_in_the_repository_is_honoured(tmp_path):
    """`blame.ignoreRevsFile = .git-blame-ignore-revs`, as projects ask: read from the work tree, so the commit it
    names (the one that brought buf_put's bug in) is looked through and the case has no line of its own."""
    h = hr.build(tmp_path)
    (h.repo / ".git-blame-ignore-revs").write_text(f"{h.put_bug}\n")
    hr.git(h.repo, "config", "blame.ignoreRevsFile", ".git-blame-ignore-revs")
    case = next(c for c in history.candidates(h.repo, ["HEAD"]).cases if c.introducing == h.put_bug)
    assert bugs.locate(h.repo, case, Options().wants) == "the introducing commit wrote no line that the fix changes"
