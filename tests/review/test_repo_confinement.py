"""Nothing a repository's own files say takes the review outside it (issue 38, item 3).

The work tree of a reviewed repository is the folder holding its `.git` (``k3lsp.git.repo.locate``), never a place
its config names: `core.worktree`, `core.bare = false` in a bare repository, a `.git` file pointing at another
repository, or `GIT_DIR`/`GIT_WORK_TREE` in the environment. A linked work tree and a submodule, whose git
directories name them back, are their own folders. Each test builds the repository with a token in a file beside
it and reviews it through the real audit core on a probing fake daemon: every audit asks the model's `grep` for
the token, as a steered model would, and the test reads what the tools answered and which code was sent.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.eval import bugs, history
from k3lsp.eval import git as eval_git
from k3lsp.git import repo as gitrepo
from k3lsp.review import changed as review
from k3lsp.review import series
from k3lsp.wire.cache import ResultCache
from tests.review import repos
from tests.support.fake_daemon import FakeDaemon

OPTIONS = review.review_options(Options())
INSIDE, OUTSIDE = "K3TOKEN-inside-the-repository", "K3TOKEN-beside-the-repository"
LEAK_C = f"int leak(void)\n{{\n\treturn 0; /* {OUTSIDE} */\n}}\n"


class Probing(FakeDaemon):
    """The fake daemon as a steered model: before each audit's answer it greps the workspace for the token."""

    async def stream(self, kind, fields, *, tools=None):
        ok, text = await tools({"kind": "tool_request", "call": "c1", "tool": "grep", "args": {"pattern": "K3TOKEN"}})
        self.calls.append({"op": "probe", "unit": fields["unit"], "code": fields["code"], "ok": ok, "text": text})
        async for message in super().stream(kind, fields, tools=tools):
            yield message


def probes(fake) -> list[dict]:
    return [c for c in Probing(fake.path, None).calls if c["op"] == "probe"]


async def reviewed(fake, repo: gitrepo.Repository, patches) -> review.ReviewReport:
    pool = Pool(OPTIONS, ResultCache(), transport=Probing.factory(fake.path))
    try:
        return await review.review_patches(patches, repo, OPTIONS, pool)
    finally:
        await pool.close()


def beside(tmp_path: Path) -> Path:
    """A folder holding a C file and a text file with the outside token; the repositories go below it."""
    outer = tmp_path / "outer"
    repos.write(outer, {"leak.c": LEAK_C, "notes.txt": f"{OUTSIDE}\n"})
    return outer


def driver(root: Path) -> Path:
    """A repository whose HEAD is the driver patch, with the inside token in a file of its own."""
    repos.repository(root, {"drv.c": repos.DRIVER_C, "inside.txt": f"{INSIDE}\n"})
    repos.commit(root, {"drv.c": repos.DRIVER_PATCHED}, "drv: copy the whole request")
    return root


def patches(repo: gitrepo.Repository, mode: str) -> list[series.Patch]:
    if mode == "commit":
        return [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)]
    return [series.worktree(repo, repo.commit("HEAD~1"), OPTIONS.wants, "HEAD~1")]


@pytest.mark.parametrize("mode", ["commit", "worktree"])
async def test_core_worktree_naming_an_ancestor_reaches_nothing_beside_the_repository(fake, tmp_path, mode):
    outer = beside(tmp_path)
    root = driver(outer / "a" / "repo")
    repos.git(root, "config", "core.worktree", "../../..")  # from repo/.git: outer
    repo = gitrepo.Repository(root, OPTIONS.max_file_bytes)
    report = await reviewed(fake, repo, patches(repo, mode))
    sent = probes(fake)
    for probe in sent:
        assert OUTSIDE not in probe["text"] and OUTSIDE not in probe["code"], probe
        assert probe["ok"] and INSIDE in probe["text"], probe  # the tools work, rooted at the repository
    (patch,) = report.patches
    assert set(patch.files) == {"drv.c"} and {t.unit.name for t in patch.units} == {"drv_read", "drv_index"}
    assert {p["unit"] for p in sent} == {"drv_read", "drv_index"} and not report.errors, report.errors
    assert repo.workdir == root.resolve() and repo.root == root.resolve()


def test_a_git_file_naming_another_repository_is_refused(tmp_path):
    """A folder whose `.git` file says `gitdir: ../victim/.git` would have its review read the victim's history
    (and `eval fixes` its `Fixes:` tags); the victim's git directory names its own folder as its work tree."""
    victim = repos.repository(tmp_path / "victim", {"secret.c": LEAK_C})
    repos.commit(victim, {"secret.c": LEAK_C.replace("return 0", "return 1")}, f"private\n\nFixes: {'0' * 12}\n")
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / ".git").write_text("gitdir: ../victim/.git\n")
    with pytest.raises(gitrepo.GitError, match=r"own work tree is .*victim"):
        gitrepo.Repository(evil)
    with pytest.raises(eval_git.GitError, match=r"own work tree is .*victim"):
        history.candidates(evil, ["HEAD"])


def test_a_linked_work_tree_and_a_submodule_are_the_folders_holding_their_git_files(tmp_path):
    """Their git directories are elsewhere but name them back (`worktrees/<name>/gitdir`, a submodule's
    `core.worktree`): each is reviewed as its own folder, its HEAD its own."""
    main = driver(tmp_path / "main")
    other = repos.repository(tmp_path / "other", {"lib.c": "int lib(void)\n{\n\treturn 2;\n}\n"})
    repos.git(main, "worktree", "add", "-q", "-b", "side", str(tmp_path / "linked"), "HEAD~1")
    repos.git(main, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(other), "sub")
    for folder, subject in ((tmp_path / "linked", "base"), (main / "sub", "base")):
        repo = gitrepo.Repository(folder)
        assert repo.workdir == folder.resolve() and repo.commit("HEAD").subject == subject
    assert gitrepo.Repository(main / "sub").worktree().read("lib.c") == b"int lib(void)\n{\n\treturn 2;\n}\n"


async def test_a_bare_repository_saying_core_bare_false_has_no_work_tree(fake, tmp_path):
    """A bare repository (no `.git` folder) with `core.bare = false`: git and libgit2 take its parent folder as the
    work tree, here the folder with the token; the review sees none, and the model gets no tools."""
    outer = beside(tmp_path)
    source = driver(tmp_path / "source")
    bare = outer / "drv.git"
    repos.git(tmp_path, "clone", "-q", "--bare", str(source), str(bare))
    repos.git(bare, "config", "core.bare", "false")
    repo = gitrepo.Repository(bare)
    assert repo.workdir is None and repo.root == bare.resolve()
    await reviewed(fake, repo, patches(repo, "commit"))
    sent = probes(fake)
    assert sent and all(not p["ok"] and "no workspace tools" in p["text"] for p in sent), sent


def test_git_dir_and_git_work_tree_in_the_environment_are_ignored(tmp_path, monkeypatch):
    outer = beside(tmp_path)
    root = driver(outer / "repo")
    victim = repos.repository(tmp_path / "victim", {"secret.c": LEAK_C})
    monkeypatch.setenv("GIT_DIR", str(victim / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(outer))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(victim / ".git" / "objects"))
    repo = gitrepo.Repository(root)
    assert repo.workdir == root.resolve() and repo.commit("HEAD").subject == "drv: copy the whole request"
    assert [c.subject for c in repo.history("HEAD", 5)] == ["drv: copy the whole request", "base"]
    (found,) = eval_git.commits(root, ["HEAD"], walk=False)
    assert found[2].startswith("drv: copy the whole request")


def test_objects_borrowed_from_outside_the_repository_are_refused(tmp_path):
    """`objects/info/alternates` naming another repository's objects, and a branch at one of its commits (known by
    its id alone): the review would audit the victim's code, and `eval fixes` resolve tags against its history.
    Made whole as the refusal says (`git repack -a -d`, the file deleted), the repository holds that commit."""
    victim = repos.repository(tmp_path / "victim", {"secret.c": LEAK_C})
    evil = repos.repository(tmp_path / "evil", {"README": "nothing here\n"})
    alternates = evil / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{victim / '.git' / 'objects'}\n")
    repos.git(evil, "update-ref", "refs/heads/main", repos.git(victim, "rev-parse", "HEAD"))
    with pytest.raises(gitrepo.GitError, match=r"borrows objects from .*victim"):
        gitrepo.Repository(evil)
    with pytest.raises(eval_git.GitError, match=r"borrows objects from .*victim"):
        eval_git.commits(evil, ["HEAD"])
    repos.git(evil, "repack", "-q", "-a", "-d")
    alternates.unlink()
    repo = gitrepo.Repository(evil)
    assert repo.tree(repo.commit("HEAD")).read("secret.c") == LEAK_C.encode()


def test_objects_borrowed_past_a_padding_of_comments_are_refused(tmp_path):
    """The alternates file as git reads it, whole: a line naming the victim's objects after 64 KiB of comments
    (past what was read of it) borrowed them unseen; a file too long to check is refused."""
    victim = repos.repository(tmp_path / "victim", {"secret.c": LEAK_C})
    evil = repos.repository(tmp_path / "evil", {"README": "nothing here\n"})
    alternates = evil / ".git" / "objects" / "info" / "alternates"
    alternates.write_text("# padding\n" * 8_000 + f"{victim / '.git' / 'objects'}\n")
    repos.git(evil, "update-ref", "refs/heads/main", repos.git(victim, "rev-parse", "HEAD"))
    with pytest.raises(gitrepo.GitError, match=r"alternates.*over the limit"):
        gitrepo.Repository(evil)


def armed_submodule(tmp_path: Path) -> tuple[Path, Path, dict[str, str], dict[str, str]]:
    """(repository, marker, its commits, an environment): the introducing commit of a driver bug also adds a
    submodule whose URL is an `ext::` command leaving the marker, and a later fix names that commit in its
    `Fixes:` tag and moves the submodule. git lets no repository allow `ext::` for itself (a submodule is cloned
    outside it), so the environment's HOME has a user config that allows it, and recursion, everywhere."""
    marker, home = tmp_path / "ext-ran", tmp_path / "home"
    repos.write(home, {".gitconfig": '[protocol]\n\tallow = always\n[protocol "ext"]\n\tallow = always\n'})
    root = repos.repository(tmp_path / "armed", {"drv.c": repos.DRIVER_C})
    modules = f'[submodule "sub"]\n\tpath = sub\n\turl = ext::sh -c touch% {marker}\n'
    commits: dict[str, str] = {}
    for name, text, sub, message in (
        ("introducing", repos.DRIVER_PATCHED, "1" * 40, "drv: copy the whole request, and a submodule"),
        ("fix", repos.DRIVER_C, "2" * 40, "drv: bound the copy\n\nFixes: {introducing}"),
    ):
        repos.write(root, {".gitmodules": modules, "drv.c": text})
        repos.git(root, "add", ".gitmodules", "drv.c")
        repos.git(root, "update-index", "--add", "--cacheinfo", f"160000,{sub},sub")  # a gitlink, never fetched
        repos.git(root, "commit", "-q", "-m", message.format(introducing=commits.get("introducing", "")[:12]))
        commits[name] = repos.git(root, "rev-parse", "HEAD")
    for key, value in {
        "protocol.ext.allow": "always",
        "submodule.recurse": "true",
        "fetch.recurseSubmodules": "true",
        "diff.submodule": "log",
        "status.submoduleSummary": "true",
    }.items():
        repos.git(root, "config", key, value)
    return root, marker, commits, {"HOME": str(home)}


def test_the_ext_submodule_trap_works_when_git_is_run_the_naive_way(tmp_path):
    """What a tool updating submodules would run: the `ext::` command runs (so the test below could fail)."""
    root, marker, _, env = armed_submodule(tmp_path)
    git = ["git", "-C", str(root), "submodule", "update", "--init"]
    subprocess.run(git, capture_output=True, timeout=60, env=os.environ | env, check=False)
    assert marker.exists()


async def test_a_submodule_with_an_ext_url_is_neither_fetched_nor_read(fake, tmp_path, monkeypatch):
    """Every review mode and `eval fixes`' selection, sampling and bug lines: nothing runs the `ext::` command, and
    the submodule (a gitlink, no file) is no reviewed file."""
    root, marker, commits, env = armed_submodule(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    repo = gitrepo.Repository(root)
    reports = [await reviewed(fake, repo, patches(repo, mode)) for mode in ("commit", "worktree")]
    assert all(set(r.patches[0].files) == {"drv.c"} for r in reports)
    selection = history.candidates(root, ["HEAD"])
    assert [(c.fix, c.introducing) for c in selection.cases] == [(commits["fix"], commits["introducing"])]
    (case,) = history.sample(root, selection, None, 0, OPTIONS.wants).cases
    bug = bugs.locate(root, case, OPTIONS.wants)
    assert isinstance(bug, bugs.Bug) and {line.path for line in bug.lines} == {"drv.c"}
    assert not marker.exists()
