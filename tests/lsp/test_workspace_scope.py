"""A workspace audit over ``askAboveUnits`` says what it will cost and asks which code to audit (issue 44), on the
fake daemon (the ``logic`` tier) with a generated git workspace of 40 one-line functions and a threshold of 10:
a client that answers ``window/showMessageRequest`` picks the scope (or cancels, and nothing is sent); one that
cannot be asked is told the cost and gets the changed code; the command's argument names a scope and asks
nothing."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from k3lsp.lsp import workscope
from tests.review import repos
from tests.support.lsp import editor

pytestmark = pytest.mark.logic

SETTINGS = {"askAboveUnits": 10}


def functions(prefix: str, changed: int | None = None) -> str:
    return "".join(f"int {prefix}_{i}(int x) {{ return x + {i if i != changed else -i}; }}\n" for i in range(20))


def workspace(tmp_path):
    """src/a.c and lib/b.c, 20 functions each, committed; then lib/b.c's b_3 changed in the work tree."""
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "src" / "a.c").write_text(functions("a"))
    (root / "lib" / "b.c").write_text(functions("b"))
    repos.git(root, "init", "-q", "-b", "main")
    repos.git(root, "add", "-A")
    repos.git(root, "commit", "-q", "-m", "base")
    (root / "lib" / "b.c").write_text(functions("b", changed=3))
    return root


def audited(status: dict) -> list[str]:
    return [c["unit"] for c in status["backend"]["calls"] if c["op"] == "audit"]


def answering(ed, *titles: str) -> list[lsp.ShowMessageRequestParams]:
    """Answer the server's questions with ``titles`` in turn; the questions asked, as they come."""
    asked, answers = [], list(titles)

    @ed.client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
    def question(params: lsp.ShowMessageRequestParams) -> lsp.MessageActionItem | None:
        asked.append(params)
        return lsp.MessageActionItem(title=answers.pop(0))

    return asked


async def test_a_large_workspace_audit_says_its_cost_and_audits_the_scope_chosen(fake, tmp_path):
    root = workspace(tmp_path)
    fake.write({})
    async with editor(root, settings=SETTINGS, fake=fake, cache_dir=tmp_path / "c") as ed:
        asked = answering(ed, workscope.CANCEL, "Changed code")
        ed.open("src/a.c")
        cancelled = await ed.command("k3lsp.auditWorkspace")
        nothing = audited(await ed.status())
        report = await ed.command("k3lsp.auditWorkspace")
        sent = audited(await ed.status())
    question = asked[0]
    assert question.message.startswith("k3 workspace audit: 2 files, 40 units, about ")
    assert "tokens of code: at least " in question.message and "of prefill at ~300 tokens/s" in question.message
    assert [a.title for a in question.actions or []] == ["Changed code", "Folder src/", "Everything", "Cancel"]
    assert cancelled["cancelled"] is True and cancelled["files"] == 0 and nothing == []
    assert report["files"] == 1 and report["error"] is None  # lib/b.c, and only its changed function
    assert sent == ["b_3"]


async def test_a_client_that_cannot_be_asked_is_told_and_gets_the_changed_code(fake, tmp_path):
    root = workspace(tmp_path)
    fake.write({})
    async with editor(root, profile="emacs", settings=SETTINGS, fake=fake, cache_dir=tmp_path / "c") as ed:
        report = await ed.command("k3lsp.auditWorkspace")
        sent = audited(await ed.status())
        named = await ed.command("k3lsp.auditWorkspace", "src")  # a folder named: no question, no estimate
        wrong = await ed.command("k3lsp.auditWorkspace", "../elsewhere")
        after = audited(await ed.status())
    (told,) = [m for m in ed.shown(lsp.MessageType.Warning) if m.startswith("k3 workspace audit: 2 files")]
    assert "40 units" in told and 'Auditing changed code only: run k3lsp.auditWorkspace with "all"' in told
    assert report["files"] == 1 and sent == ["b_3"]
    assert named["files"] == 1 and sorted(after[1:]) == sorted(f"a_{i}" for i in range(20))
    assert "neither changed, built, all nor a folder of the workspace" in wrong["error"]


async def test_below_the_threshold_nothing_is_asked(fake, tmp_path):
    root = workspace(tmp_path)
    fake.write({})
    async with editor(root, settings={"askAboveUnits": 40}, fake=fake, cache_dir=tmp_path / "c") as ed:
        asked = answering(ed)
        report = await ed.command("k3lsp.auditWorkspace")
    assert asked == [] and report["files"] == 2


def test_the_estimate_times_whole_prompts_once_the_daemon_has_measured_one():
    cost = workscope.Estimate(units=1000, chars=350_000.0, sampled=10, files=100)
    assert cost.said({}) == (
        "100 files, about 1,000 units, about 100,000 tokens of code: at least 6 min of prefill at ~300 tokens/s (a "
        "unit's prompt adds its file's context and the tool turns; units in the result cache cost nothing)"
    )
    engine = {"prefilled_tokens": 6000, "step_seconds": {"prefill": 10.0}}
    status = {"backend": {"audits_prefilled": 4, "audit_prefilled_tokens": 10_000, "engine": engine}}
    assert cost.said(status) == (
        "100 files, about 1,000 units, about 100,000 tokens of code, about 2,500,000 tokens of prompt (2,500 a unit, "
        "the mean of the 4 audits the daemon has prefilled): about 69 min of prefill at 600 tokens/s, the daemon's "
        "measured rate (units in the result cache cost nothing)"
    )
