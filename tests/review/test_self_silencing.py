"""A patch cannot silence its own finding (issue 38, item 6).

The attack: a reviewed commit that adds ``/* k3-audit: ignore */`` on its bad line, or its finding's fingerprint
to ``.k3audit-baseline.json``, turned the CI gate from exit 1 ("1 introduced") to exit 0 ("1 silenced"). Now, in
review, a suppression on a line the patch added or modified, and a baseline entry its parent did not have, do not
apply: the finding is reported as the rest are (here introduced: exit 1), and the report says the patch tried to
silence it. A baseline entry that was there before the patch still applies.

`k3lsp review` runs as a process on repositories the test builds, against a scripted daemon (a ROUTER answering
``drv_read`` with the unbounded copy of ``tests/review/conftest.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from k3lsp.findings import model as findings
from k3lsp.findings import suppress
from k3lsp.units import split as units
from tests.batch.test_sarif import valid_sarif
from tests.review import repos
from tests.review.conftest import COPY
from tests.support.batch import run_k3lsp
from tests.support.peer import WELCOME, peer, reply

SILENCED_LINE = repos.DRIVER_PATCHED.replace(
    "r->len + n))\n", "r->len + n)) /* k3-audit: ignore */\n"
)  # the bad line, with the directive on it: no line moves


async def answer(sock, ident, msg):
    """A daemon answering ``drv_read`` with the unbounded copy and every other unit with nothing."""
    kind, msg_id = msg["kind"], msg["id"]
    if kind == "hello":
        await reply(sock, ident, "welcome", msg_id, **(WELCOME | {"fingerprint": "f" * 64}))
    elif kind == "audit":
        if msg["unit"] == "drv_read":
            await reply(sock, ident, "finding", msg_id, finding=COPY)
        await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})


def baseline_of_copy(text: str) -> str:
    """A baseline accepting the unbounded copy in ``text``'s drv_read, by its fingerprint (as the code action
    writes it)."""
    unit = next(u for u in units.split(text) if u.name == "drv_read")
    fingerprint = findings.fingerprint(findings.validate(COPY, unit), unit)
    entry = {"fingerprint": fingerprint, "cwe": 787, "title": COPY["title"], "path": "drv.c"}
    return json.dumps({"version": suppress.BASELINE_VERSION, "findings": [entry]}, indent=1) + "\n"


async def review(root: Path, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    async with peer(answer) as endpoint:
        return await run_k3lsp(
            "review", "--endpoint", endpoint, "-C", str(root), "HEAD", *args, cache=tmp_path / "c", cwd=root
        )


def one_finding(out: str) -> tuple[dict, dict]:
    (patch,) = json.loads(out)["patches"]
    (finding,) = patch["findings"]
    return patch, finding


async def test_a_suppression_comment_the_patch_adds_to_its_own_bad_line_does_not_apply(tmp_path):
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C})
    repos.commit(root, {"drv.c": SILENCED_LINE}, "drv: copy the whole request, quietly")
    code, out, err = await review(root, tmp_path, "--json")
    assert code == 1, err  # before the fix: 0, the finding "silenced"
    patch, finding = one_finding(out)
    assert (finding["cwe"], finding["introduced"], finding["silenced_by_patch"]) == (787, True, "inSource")
    assert patch["silenced"] == []
    assert json.loads(out)["stats"]["silenced_by_patch"] == 1
    code, text, _ = await review(root, tmp_path)
    assert code == 1
    assert "the patch adds the k3-audit: ignore comment that would silence it; not applied" in text, text
    assert "1 introduced" in text and "0 silenced" in text and "1 silenced_by_patch" in text


async def test_a_baseline_entry_the_patch_adds_for_its_own_finding_does_not_apply(tmp_path):
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C})
    patched = {"drv.c": repos.DRIVER_PATCHED, suppress.BASELINE_NAME: baseline_of_copy(repos.DRIVER_PATCHED)}
    repos.commit(root, patched, "drv: copy the whole request, and accept it")
    code, sarif, err = await review(root, tmp_path, "--format", "sarif")
    assert code == 1, err  # before the fix: 0, the finding "silenced"
    (run,) = valid_sarif(sarif)["runs"]
    (result,) = run["results"]
    assert (result["ruleId"], result["baselineState"]) == ("CWE-787", "new")  # introduced
    assert result["properties"]["silencedByPatch"] == "external"
    assert "suppressions" not in result
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert "the patch adds the baseline entry that would silence it; not applied" in note["message"]["text"]
    code, mail, _ = await review(root, tmp_path, "--format", "email")
    assert (
        "introduced by this patch; the patch adds the baseline entry that would silence it (not applied)"
        in " ".join(mail.split())
    ), mail


async def test_a_baseline_entry_from_before_the_patch_still_applies(tmp_path):
    root = repos.repository(
        tmp_path / "drv", {"drv.c": repos.DRIVER_C, suppress.BASELINE_NAME: baseline_of_copy(repos.DRIVER_PATCHED)}
    )
    repos.commit(root, {"drv.c": repos.DRIVER_PATCHED}, "drv: copy the whole request")
    code, out, err = await review(root, tmp_path, "--json")
    assert code == 0, err
    (patch,) = json.loads(out)["patches"]
    assert patch["findings"] == [] and [f["silenced_by_patch"] for f in patch["silenced"]] == [""]


async def test_a_series_cannot_silence_a_later_patch_with_an_earlier_one(tmp_path):
    """The first commit of a range adds the baseline entry and a directive on the line above the bad line, the
    second the bad line: a range is reviewed against its base, so neither applies."""
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C})
    ahead = repos.DRIVER_C.replace("size_t n)\n{\n", "size_t n)\n{ /* k3-audit: ignore */\n", 1)
    repos.commit(root, {"drv.c": ahead, suppress.BASELINE_NAME: baseline_of_copy(repos.DRIVER_PATCHED)}, "prepare")
    bad = repos.DRIVER_PATCHED.replace("size_t n)\n{\n", "size_t n)\n{ /* k3-audit: ignore */\n", 1)
    repos.commit(root, {"drv.c": bad}, "drv: copy the whole request")
    async with peer(answer) as endpoint:
        args = ("review", "--endpoint", endpoint, "-C", str(root), "HEAD~2..HEAD", "--json")
        code, out, err = await run_k3lsp(*args, cache=tmp_path / "c", cwd=root)
    assert code == 1, err  # before: 0, silenced by what the range's first commit added
    first, second = json.loads(out)["patches"]
    (finding,) = second["findings"]
    assert (finding["cwe"], finding["introduced"], finding["silenced_by_patch"]) == (787, True, "inSource")
    # the first commit's directive is over a line it did not change: shown there as pre-existing, tried too
    assert [(f["introduced"], f["silenced_by_patch"]) for f in first["findings"]] == [(False, "inSource")]


async def test_a_baseline_entry_added_after_the_reviewed_commit_is_not_called_its_own(tmp_path):
    """Reviewing an older commit: the work tree's baseline holds an entry a later commit added. It does not apply
    (the base did not have it), and the report does not say the reviewed commit added it."""
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C})
    repos.commit(root, {"drv.c": repos.DRIVER_PATCHED}, "drv: copy the whole request")
    repos.commit(root, {suppress.BASELINE_NAME: baseline_of_copy(repos.DRIVER_PATCHED)}, "accept it later")
    async with peer(answer) as endpoint:
        args = ("review", "--endpoint", endpoint, "-C", str(root), "HEAD~1", "--json")
        code, out, err = await run_k3lsp(*args, cache=tmp_path / "c", cwd=root)
    assert code == 1, err
    _, finding = one_finding(out)
    assert (finding["introduced"], finding["silenced_by_patch"]) == (True, ""), out
