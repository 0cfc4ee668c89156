"""What the eval report says about its own run: when it started (not when it finished), which k3lsp, whether a
daemon was asked at all (`--witnesses-only` and `--cases-only` ask none: not "none answered"), and, when
nothing was reviewed, no empty table and no empty list of charts."""

from __future__ import annotations

import json
import time

import pytest

from k3lsp import __version__
from k3lsp.eval import report
from k3lsp.witnesses.analyze import find
from tests.eval import castle_data as data
from tests.eval import history_repo as hr
from tests.support.batch import k3lsp

NOBODY = "tcp://127.0.0.1:9"  # no daemon listens there


@pytest.fixture(scope="module")
def h(tmp_path_factory) -> hr.History:
    return hr.build(tmp_path_factory.mktemp("history"))


def test_started_is_when_the_run_began_and_finished_when_it_ended():
    began = time.time() - 3600  # a run of an hour
    head = report.meta(["k3lsp", "eval", "castle"], {}, began)
    assert head["started"] == time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(began))
    assert head["finished"] >= time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(began + 3600))
    assert head["k3lsp"] == __version__


def test_cases_only_asks_no_daemon_and_says_so(h, tmp_path):
    before = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    out = tmp_path / "o"
    done = k3lsp("eval", "fixes", "--repo", str(h.repo), "--cases-only", "--out", str(out), cache=tmp_path / "c",
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = json.loads((out / "report.json").read_text())
    assert before <= rep["started"] <= rep["finished"]
    md = done.stdout
    assert "- daemon: none asked (--cases-only: nothing was reviewed)" in md
    assert "none answered" not in md
    assert f"- k3lsp {__version__}, started {rep['started']}, finished {rep['finished']}:" in md
    assert "## Configurations" not in md and "| configuration |" not in md  # no table without a row
    assert "Nothing was reviewed: the cases below are what a run would review." in md
    assert "charts: ;" not in done.stderr
    assert "no charts: nothing was judged; report.json and report.md in" in done.stderr


def test_witnesses_only_asks_no_daemon_and_says_so(tmp_path):
    if find("cppcheck") is None:
        pytest.skip("cppcheck is not installed (docs/witnesses.md says how)")
    dataset = data.write(tmp_path / "castle.json", data.dataset())
    done = k3lsp("eval", "castle", str(dataset), "--out", str(tmp_path / "out"), "--witnesses-only=cppcheck",
                 "--endpoint", NOBODY, cache=tmp_path / "c", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "- daemon: none asked (--witnesses-only: the analyzers alone)" in done.stdout
    assert "none answered" not in done.stdout
    assert "charts: castle-score.png, castle-cwe-recall.png" in done.stderr
