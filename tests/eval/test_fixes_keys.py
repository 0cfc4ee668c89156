"""One bug is one case (issue 38, item 8): the cases of `k3lsp eval fixes` are keyed by the commits their ids
resolve to, not by how a message or a list spells them. A fix whose message names its introducing commit twice,
as `Fixes: <12 hex>` and `Fixes: <7 hex>`, and a fix listed twice under two spellings, each give one case."""

from __future__ import annotations

from k3lsp.eval import history
from tests.eval import history_repo as hr


def twice_tagged(tmp_path) -> tuple:
    """(repository, the introducing commit, the fix naming it in two spellings, an unrelated later commit)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    hr.git(repo, "init", "-q", "-b", "main")
    hr.commit(repo, "initial", {"net/core/buf.c": hr.BUF_V0})
    bug = hr.commit(repo, "net: add buf_put", {"net/core/buf.c": hr.BUF_BUG})
    tags = f"{hr.fixes_tag(bug, 'net: add buf_put')}\nFixes: {bug[:7].upper()}\nFixes: {bug}\n"
    fix = hr.commit(repo, f"net: bound buf_put\n\n{tags}", {"net/core/buf.c": hr.BUF_BUG.replace("= v;", "= v & 15;")})
    later = hr.commit(repo, "docs: a readme", {"README": "a project\n"})
    return repo, bug, fix, later


def test_one_fix_naming_its_introducing_commit_in_three_spellings_is_one_case(tmp_path):
    repo, bug, fix, _ = twice_tagged(tmp_path)
    selection = history.candidates(repo, ["HEAD"])
    assert [(c.fix, c.introducing) for c in selection.cases] == [(fix, bug)]
    assert not selection.skipped
    assert [(c.fix, c.introducing) for c in history.sample(repo, selection, None, 0, lambda p: True).cases] == [
        (fix, bug)
    ]


def test_a_fix_listed_under_two_spellings_is_one_case(tmp_path):
    repo, bug, fix, later = twice_tagged(tmp_path)
    selection = history.candidates(repo, [fix[:12], fix, fix[:7], later], listed=True)
    assert [(c.fix, c.introducing) for c in selection.cases] == [(fix, bug)]
    assert selection.considered == 2 and selection.skipped == {"no Fixes: tag": 1}
