"""The review front end on repositories the tests build, its daemon the fake (the real audit core above a scripted
transport: the ``logic`` tier): which units a patch sends, with which change, what is introduced and what was
there before, a series patch by patch, renames, deletions, new and binary files, callers, the cache, and the
reply for the list and SARIF."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.run import Target
from k3lsp.git import repo as gitrepo
from k3lsp.review import changed as review
from k3lsp.review import mbox, series
from k3lsp.review import output as review_output
from k3lsp.wire.cache import ResultCache
from tests.review import repos
from tests.review.conftest import COPY
from tests.support.core import audit
from tests.support.fake_daemon import FakeDaemon

FRESH = "long fresh_entry(long a, long b)\n{\n\tlong s = a * b;\n\treturn s - a;\n}\n"
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())
OPTIONS = review.review_options(Options())


def calls(fake) -> list[dict]:
    return [c for c in FakeDaemon(fake.path, None).calls if c["op"] == "audit"]


async def run_review(fake, repo: gitrepo.Repository, patches, cache: ResultCache | None = None, **how):
    pool = Pool(OPTIONS, cache or ResultCache(), transport=FakeDaemon.factory(fake.path))
    try:
        return await review.review_patches(patches, repo, OPTIONS, pool, review.ReviewOptions(**how))
    finally:
        await pool.close()


@pytest.fixture
def driver(tmp_path) -> Path:
    """A repository whose HEAD is the patch of repos.DRIVER_PATCHED."""
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C, "README": "a driver\n"})
    repos.commit(root, {"drv.c": repos.DRIVER_PATCHED}, "drv: copy the whole request")
    return root


async def test_a_patch_touching_two_functions_audits_exactly_those_with_the_change_in_view(fake, driver):
    repo = gitrepo.Repository(driver)
    report = await run_review(fake, repo, [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)])
    sent = calls(fake)
    assert sorted(c["unit"] for c in sent) == ["drv_index", "drv_read"]  # not drv_ioctl, which did not change
    assert {(c["priority"], c["effort"]) for c in sent} == {("interactive", "high")}
    changes = {c["unit"]: c["changes"] for c in sent}
    assert changes["drv_read"]["lines"] == [3] and changes["drv_index"]["lines"] == [4]
    assert "if (n > sizeof(r->buf))" in changes["drv_read"]["preimage"]  # the function before the patch
    assert "v += 1" not in changes["drv_index"]["preimage"] and "int v = table[i];" in changes["drv_index"]["preimage"]
    (patch,) = report.patches
    assert patch.patch.title == "drv: copy the whole request" and report.exit_status("info") == 1


async def test_introduced_on_the_changed_line_and_pre_existing_on_an_untouched_line(fake, driver):
    repo = gitrepo.Repository(driver)
    (patch,) = (await run_review(fake, repo, [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)])).patches
    (copy,) = patch.introduced
    assert (copy.row.cwe, copy.why, copy.row.line) == (
        787,
        review.LINES,
        repos.line_of(repos.DRIVER_PATCHED, "copy_from_user"),
    )
    (index,) = patch.preexisting
    assert (index.row.cwe, index.why, index.row.line) == (
        125,
        "",
        repos.line_of(repos.DRIVER_PATCHED, "int v = table[i]"),
    )
    assert [f.row.cwe for f in patch.findings] == [787, 125]  # introduced first
    report = review.ReviewReport(repo.root, [patch])
    assert report.exit_status("high") == 1 and report.exit_status("critical") == 0


async def test_the_model_may_say_a_finding_on_an_untouched_line_was_introduced(fake, driver):
    said = json.loads(fake.path.read_text())
    said["units"]["drv_index"]["findings"][0]["introduced"] = True
    fake.write(said)
    repo = gitrepo.Repository(driver)
    (patch,) = (await run_review(fake, repo, [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)])).patches
    assert [(f.row.cwe, f.why) for f in patch.introduced] == [(787, review.LINES), (125, review.MODEL)]


async def test_callers_only_when_asked_and_at_background_priority(fake, driver):
    repo = gitrepo.Repository(driver)
    patch = series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)
    (with_callers,) = (await run_review(fake, repo, [patch], callers=True)).patches
    by_unit = {c["unit"]: c for c in calls(fake)}
    assert sorted(by_unit) == ["drv_index", "drv_ioctl", "drv_read"]
    assert by_unit["drv_ioctl"]["priority"] == "background" and by_unit["drv_ioctl"]["changes"] is None
    (caller,) = [f for f in with_callers.findings if f.caller]
    assert (caller.row.cwe, caller.introduced) == (20, False)


async def test_a_reviewed_unit_and_the_same_unit_audited_plainly_never_share_a_cache_entry(fake, driver, tmp_path):
    repo = gitrepo.Repository(driver)
    cache = ResultCache(tmp_path / "results.sqlite3")
    patch = series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)
    await run_review(fake, repo, [patch], cache=cache)
    assert len(calls(fake)) == 2
    await run_review(fake, repo, [patch], cache=cache)  # the same review again: from the cache
    assert len(calls(fake)) == 2
    (reviewed,) = [
        t for t in (await run_review(fake, repo, [patch], cache=cache)).patches[0].units if t.unit.name == "drv_read"
    ]
    plain = Target(reviewed.root, reviewed.path, reviewed.unit)
    assert plain.key != reviewed.key and plain.key == reviewed.unit.key
    pool = Pool(OPTIONS, cache, transport=FakeDaemon.factory(fake.path))
    try:
        _, summary = await audit(pool, [plain])
    finally:
        await pool.close()
    assert summary.audited == 1 and summary.cached == 0  # the reviewed answer did not stand for the unit's own
    assert calls(fake)[-1]["unit"] == "drv_read" and calls(fake)[-1]["changes"] is None


async def test_a_three_patch_mbox_is_reviewed_patch_by_patch_with_its_subjects(fake, driver, tmp_path):
    """Three commits on top of the patched driver, sent as a series (format-patch's mbox with a cover letter) and
    reviewed against the commit before them: each patch's own units, each with its subject and Message-ID."""
    base = repos.git(driver, "rev-parse", "HEAD")
    text = repos.DRIVER_PATCHED
    for n, (old, new) in enumerate(
        [
            ("\treturn v;", "\treturn v + 1;"),
            ("\treturn 0;\n}", "\treturn 1;\n}"),
            ("return drv_read(", "return 2 * drv_read("),
        ],
        1,
    ):
        text = text.replace(old, new, 1)
        repos.commit(driver, {"drv.c": text}, f"drv: step {n}")
    box = tmp_path / "series.mbx"
    box.write_text(
        repos.git(driver, "format-patch", "--stdout", "--cover-letter", "--thread", "-n", f"{base}..HEAD") + "\n"
    )
    repos.git(driver, "reset", "-q", "--hard", base)  # the reviewer's tree: the series is not applied
    repo = gitrepo.Repository(driver)
    found = series.mails(repo.tree(repo.commit("HEAD")), mbox.read(box))
    report = await run_review(fake, repo, found)
    assert [p.patch.title for p in report.patches] == [f"[PATCH {n}/3] drv: step {n}" for n in (1, 2, 3)]
    assert [[t.unit.name for t in p.units] for p in report.patches] == [["drv_index"], ["drv_read"], ["drv_ioctl"]]
    assert all(p.patch.message_id.startswith("<") and p.patch.references for p in report.patches)
    assert [len(p.introduced) for p in report.patches] == [0, 0, 1]  # drv_ioctl's finding is on its changed line
    assert not report.errors and report.exit_status("info") == 1


async def test_renames_deleted_functions_new_files_and_binary_hunks_do_not_break_it(fake, tmp_path):
    root = repos.repository(
        tmp_path / "r",
        {"old.c": repos.DRIVER_C, "gone.c": "int gone(void)\n{\n\treturn 0;\n}\n", "logo.bin": b"\x00\x01"},
    )
    ioctl = repos.DRIVER_C[repos.DRIVER_C.index("static int drv_ioctl") :]
    moved = repos.DRIVER_C.replace("\tint v = table[i];\n", "\tint v = table[i + 1];\n").replace(ioctl, "")
    repos.commit(
        root,
        {
            "old.c": None,
            "new.c": moved,
            "gone.c": None,
            "fresh.c": FRESH,
            "logo.bin": b"\x00\x02\x03",
        },
        "move, delete, add",
    )
    repo = gitrepo.Repository(root)
    (patch,) = (await run_review(fake, repo, [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)])).patches
    assert sorted((t.path, t.unit.name) for t in patch.units) == [("fresh.c", "fresh_entry"), ("new.c", "drv_index")]
    index = next(t for t in patch.units if t.unit.name == "drv_index")
    assert "table[i];" in index.changes.preimage  # the rename kept the function's history
    fresh = next(t for t in patch.units if t.path == "fresh.c")
    assert fresh.changes.preimage == "" and fresh.changes.lines == (1, 2, 3, 4, 5)
    assert "gone.c: deleted" in patch.notes and "drv_ioctl" not in {t.unit.name for t in patch.units}
    staged_bin = series.commit(repo, repo.commit("HEAD"), lambda p: True)
    assert any(f.binary and f.new_path == "logo.bin" and not f.hunks for f in staged_bin.files)


async def test_the_reply_quotes_the_hunk_with_the_comment_under_its_line(fake, driver):
    repo = gitrepo.Repository(driver)
    report = await run_review(fake, repo, [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)])
    (text,) = review_output.replies(report)
    lines = text.split("\n")
    assert lines[0] == "Subject: Re: [PATCH] drv: copy the whole request"
    at = lines.index("> +\tif (copy_from_user(r->buf, from, r->len + n))")
    assert lines[at + 1] == "" and lines[at + 2].startswith("k3-audit: high, CWE-787")
    assert COPY["title"] in " ".join(lines[at + 2 : at + 5])
    assert "> +\tv += 1;" in lines  # the other hunk carries the pre-existing finding on its context line
    prose = [line for line in lines if line and not line.startswith(">") and not line.startswith("    ")]
    assert all(len(line) <= review_output.WIDTH for line in prose), prose
    assert "drv_ioctl" not in text  # a hunk without findings is not quoted


async def test_sarif_validates_with_one_run_per_patch_and_a_baseline_state(fake, driver):
    repo = gitrepo.Repository(driver)
    report = await run_review(fake, repo, [series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)])
    log = review_output.to_sarif(report, report.exit_status("info"))
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    (run,) = log["runs"]
    assert [(r["ruleId"], r["baselineState"]) for r in run["results"]] == [("CWE-787", "new"), ("CWE-125", "unchanged")]
    assert run["automationDetails"]["id"] == f"k3lsp-review/{repos.git(driver, 'rev-parse', 'HEAD')}"
