"""`k3lsp eval fixes` on a repository the test builds: which fix commits are taken, the bug lines found by blaming
the fix's parent (through edits in between), the add-only rule, the catch rule and its window, the Wilson interval,
noise and per-subsystem rates. The git part is real; the review is a double of the review front end's interface
(``k3lsp.eval.review.CommitReviewer``), answering per commit with findings the test chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.eval import bugs, catching, charts, fixes_run, history, report, running
from k3lsp.eval.bugs import BugLine
from k3lsp.eval.matrix import Configuration
from k3lsp.eval.review import CommitReview, Introduced
from tests.eval import history_repo as hr
from tests.support import kimi
from tests.support.batch import k3lsp
from tests.support.daemon import serving

WANTS = Options().wants


@pytest.fixture(scope="module")
def h(tmp_path_factory) -> hr.History:
    return hr.build(tmp_path_factory.mktemp("history"))


def located(h: hr.History, fix: str) -> bugs.Bug:
    case = next(c for c in history.candidates(h.repo, ["HEAD"]).cases if c.fix == fix)
    found = bugs.locate(h.repo, case, WANTS)
    assert isinstance(found, bugs.Bug), found
    return found


def test_fix_commits_are_taken_when_their_tag_resolves_and_the_rest_is_counted(h):
    sel = history.candidates(h.repo, ["HEAD"])
    pairs = {(c.fix, c.introducing) for c in sel.cases}
    assert pairs == {(h.put_fix, h.put_bug), (h.name_fix, h.name_bug), (h.count_fix, h.count_bug), (h.docs_fix, h.docs)}
    assert sel.skipped == {"the fix is a merge": 1, "the Fixes: tag names no commit here": 1}
    sampled = history.sample(h.repo, sel, None, 0, WANTS)
    assert h.docs not in {c.introducing for c in sampled.cases}  # it touches no C
    assert sampled.skipped["the introducing commit touches no C"] == 1 and len(sampled.cases) == 3


def test_a_list_of_fix_commits_is_taken_as_given(h, tmp_path):
    sel = history.candidates(h.repo, [h.name_fix[:12], h.put_fix], listed=True)
    assert [c.fix for c in sel.cases] == [h.name_fix, h.put_fix]
    with pytest.raises(history.git.GitError, match="not a commit id"):
        history.candidates(h.repo, ["--output=/tmp/x"], listed=True)


def test_the_sample_is_the_same_for_the_same_seed(h):
    sel = history.candidates(h.repo, ["HEAD"])
    draws = {seed: [c.fix for c in history.sample(h.repo, sel, 2, seed, WANTS).cases] for seed in range(8)}
    assert all(len(d) == 2 for d in draws.values())
    assert draws[3] == [c.fix for c in history.sample(h.repo, sel, 2, 3, WANTS).cases]
    assert len({tuple(d) for d in draws.values()}) > 1  # the seed decides


def test_bug_lines_are_the_introducing_commits_lines_the_fix_changed_despite_edits_in_between(h):
    bug = located(h, h.put_fix)
    introduced = hr.show(h.repo, h.put_bug, "net/core/buf.c")
    assert bug.lines == (BugLine("net/core/buf.c", hr.line_of(introduced, "b->data[i] = v;")),)
    edited = hr.show(h.repo, f"{h.put_fix}^", "net/core/buf.c")
    assert hr.line_of(edited, "b->data[i] = v;") != bug.lines[0].line  # the edit in between moved it
    assert not bug.add_only


def test_an_add_only_fix_blames_the_lines_of_the_introducing_commit_next_to_it(h):
    bug = located(h, h.name_fix)
    text = hr.show(h.repo, h.name_bug, "fs/name.c")
    expected = {hr.line_of(text, "int used = 0;"), hr.line_of(text, "strcpy(dst, src);")}
    assert bug.add_only and {b.line for b in bug.lines} == expected and {b.path for b in bug.lines} == {"fs/name.c"}


def test_a_fix_that_changes_no_line_of_the_introducing_commit_has_no_bug_lines(h, tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    hr.git(repo, "init", "-q", "-b", "main")
    base = hr.commit(repo, "base", {"a.c": "int a(void)\n{\n\treturn 0;\n}\n"})
    other = hr.commit(repo, "other", {"b.c": "int b(void)\n{\n\treturn 1;\n}\n"})
    fix = hr.commit(repo, f"fix\n\n{hr.fixes_tag(other, 'other')}\n", {"a.c": "int a(void)\n{\n\treturn 2;\n}\n"})
    (case,) = history.candidates(repo, ["HEAD"]).cases
    assert (case.fix, case.introducing) == (fix, other) and base
    assert bugs.locate(repo, case, WANTS) == "the introducing commit wrote no line that the fix changes"


class Reviews:
    """The review double: per introducing commit, the introduced findings the test chose."""

    def __init__(self, answers: dict[str, CommitReview]):
        self.answers, self.asked = answers, []

    async def review(self, pool, repo: Path, commit: str, *, force: bool, fresh: bool) -> CommitReview:
        assert isinstance(pool, Pool) and fresh and force
        self.asked.append(commit)
        return self.answers[commit]


def found(path: str, line: int, end: int | None = None, severity: str = "high") -> Introduced:
    return Introduced(path, line, end or line, 787, severity, "t")


async def test_caught_missed_and_add_only_cases_add_up_to_the_rate_noise_and_subsystems(h, tmp_path):
    put, name, count = located(h, h.put_fix), located(h, h.name_fix), located(h, h.count_fix)
    put_line, strcpy = put.lines[0].line, max(b.line for b in name.lines)
    reviewer = Reviews(
        {
            h.put_bug: CommitReview((found("net/core/buf.c", put_line - 2, put_line), found("net/core/buf.c", 1))),
            h.name_bug: CommitReview((found("fs/name.c", strcpy + 3),)),  # 3 lines off: within the window
            h.count_bug: CommitReview((found("kernel/sched/count.c", 1, 1, "low"), found("README", 5))),
        }
    )
    plan = running.Plan(out=tmp_path)
    (outcome,) = await fixes_run.run(h.repo, [put, name, count], reviewer, [Configuration("default")], plan)
    assert reviewer.asked == [h.put_bug, h.name_bug, h.count_bug]  # the introducing commits, not the fixes
    assert [j.caught for j in outcome.judged] == [True, True, False]
    t = outcome.tally
    assert (t.rate.caught, t.rate.judged, t.incomplete) == (2, 3, 0)
    assert (t.findings, t.away) == (4, 2)  # the low one does not count at the default medium; README is away
    assert t.findings_per_commit == pytest.approx(4 / 3)
    assert outcome.directories == {
        "fs": catching.Rate(1, 1),
        "kernel/sched": catching.Rate(0, 1),
        "net/core": catching.Rate(1, 1),
    }
    md = fixes_report(h, [put, name, count], outcome, tmp_path)
    (row,) = [r for r in md.splitlines() if r.startswith("| default |")]
    assert row.startswith("| default | 2 / 3 | 67 % | 21 % - 94 % | 1.33 | 0.67 | 0 |"), row
    assert "| `net/core` | 1 / 1 | 100 % | 21 % - 100 % |" in md
    assert (tmp_path / "fixes-subsystems.png").read_bytes()[:4] == b"\x89PNG"
    narrow = await fixes_run.run(
        h.repo, [name], reviewer, [Configuration("default")], plan, fixes_run.Judging(window=2)
    )
    assert [j.caught for j in narrow[0].judged] == [False]


def fixes_report(h: hr.History, located: list[bugs.Bug], outcome: fixes_run.FixesOutcome, out: Path) -> str:
    """The Markdown report of one outcome, its chart drawn into ``out``."""
    sel = history.candidates(h.repo, ["HEAD"])
    head = report.meta(["k3lsp", "eval", "fixes"], {})
    rep = report.fixes_json(str(h.repo), [], sel, located, [], [outcome], fixes_run.Judging(), head)
    charts.fixes(rep, out)
    return report.fixes_markdown(rep)


async def test_a_review_with_problems_is_not_judged_and_one_that_raises_becomes_one(h, tmp_path):
    put, count = located(h, h.put_fix), located(h, h.count_fix)

    class Failing(Reviews):
        async def review(self, pool, repo, commit, *, force, fresh):
            if commit == h.count_bug:
                raise RuntimeError("boom")
            return CommitReview((), problems=("2 units not audited: no daemon left",))

    (outcome,) = await fixes_run.run(
        h.repo, [put, count], Failing({}), [Configuration("default")], running.Plan(tmp_path)
    )
    assert (outcome.tally.rate.judged, outcome.tally.incomplete) == (0, 2)
    assert outcome.judged[1].review.problems == ("the review failed: RuntimeError: boom",)
    notes = fixes_report(h, [put, count], outcome, tmp_path).split("## Notes: default")[1].split("##")[0]
    assert f"`{h.count_bug[:12]}: the review failed: RuntimeError: boom`" in notes
    assert f"`{h.put_bug[:12]}: 2 units not audited: no daemon left`" in notes


def test_the_wilson_interval_at_known_points():
    assert catching.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert catching.wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert catching.wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    # Sashiko's 53.6 % of 1,000: centre (0.536 + z²/2000) / (1 + z²/1000) = 0.53586, half-width 0.03085
    assert catching.wilson(536, 1000) == pytest.approx((0.5050, 0.5667), abs=1e-4)
    assert catching.wilson(0, 0) == (0.0, 1.0)


def test_the_command_selects_and_locates_cases_without_reviewing_them(h, tmp_path):
    out = tmp_path / "o"
    done = k3lsp(
        "eval", "fixes", "--repo", str(h.repo), "--cases-only", "--out", str(out), cache=tmp_path / "c", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert {(c["fix"], c["introducing"]) for c in report["cases"]} == {
        (h.put_fix, h.put_bug), (h.name_fix, h.name_bug), (h.count_fix, h.count_bug)
    }  # fmt: skip
    assert report["selection"]["skipped"]["the introducing commit touches no C"] == 1
    assert "## Cases" in done.stdout and h.put_fix[:12] in done.stdout and not report["configurations"]
    bad = k3lsp("eval", "fixes", "--repo", str(tmp_path), "--cases-only", cache=tmp_path / "c", cwd=tmp_path)
    assert bad.returncode == 2 and "not inside a git repository" in bad.stderr


def test_the_witnesses_are_a_setting_of_the_reviews_too(h, tmp_path):
    """A review goes through the audit service, witnesses included (tests/service/test_same_findings.py), so
    `eval fixes` takes --witnesses as `eval castle` does; it refused them once, when only castle sent alerts."""
    args = ("eval", "fixes", "--repo", str(h.repo), "--cases-only", "--witnesses", "gcc", "--out", str(tmp_path / "o"))
    done = k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def reported(line: int) -> list[dict]:
    """A turn reporting one high CWE-787 finding on the unit's ``line``."""
    finding = kimi.finding(cwe=787, severity="high", title="written past", start_line=line, end_line=line, trace=[])
    return [kimi.turn(("report_finding", finding))]


def test_the_command_reviews_each_introducing_commit_through_k3lsp_review_and_judges_it(h, tmp_path, tiny_model):
    """The whole path: `k3lsp eval fixes` reviews each introducing commit with `k3lsp review`'s review (units of
    the commit's post-image, audited with the change in view, through a real daemon) and judges what it
    introduced. The scripted model flags buf_put's write and name_copy's strcpy (unit lines 3 and 4), and
    nothing in count_up: two of three caught."""
    script = [
        {"unit": "buf_put", "turns": reported(3)},
        {"unit": "name_copy", "turns": reported(4)},
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]
    out = tmp_path / "o"
    with serving(tiny_model, script=script, args=["--max-tokens", "4000"]) as daemon:
        done = k3lsp(
            "eval", "fixes", "--repo", str(h.repo), "--endpoint", daemon.endpoint, "--out", str(out),
            cache=tmp_path / "c", cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (configuration,) = json.loads((out / "report.json").read_text())["configurations"]
    assert configuration["errors"] == []
    caught = {c["introducing"]: c["caught"] for c in configuration["cases"]}
    assert caught == {h.put_bug: True, h.name_bug: True, h.count_bug: False}
    (put,) = [c for c in configuration["cases"] if c["introducing"] == h.put_bug]
    (finding,) = put["catching"]
    put_line = hr.line_of(hr.show(h.repo, h.put_bug, "net/core/buf.c"), "b->data[i] = v;")
    assert (finding["path"], finding["start_line"], finding["cwe"]) == ("net/core/buf.c", put_line, 787)
    assert configuration["catch"]["caught"] == 2 and configuration["cost"]["units"] >= 3
