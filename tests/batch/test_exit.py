"""Exit statuses of `k3lsp audit` (0 nothing at or above the threshold, 1 findings, 2 errors) and what each
format says about errors; a real scripted daemon, real processes."""

from __future__ import annotations

import json

from tests.batch import corpus
from tests.batch.test_sarif import valid_sarif
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere


def test_threshold_decides_between_0_and_1(corpus_daemon, tmp_path):
    corpus.tree(tmp_path)
    common = ("--endpoint", corpus_daemon.endpoint, "--json")
    everything = k3lsp("audit", "proj", *common, cache=tmp_path / "c", cwd=tmp_path)
    assert everything.returncode == 1, everything.stderr
    assert {f["cwe"] for f in json.loads(everything.stdout)["findings"]} == {787, 125, 457}

    high = k3lsp("audit", "proj", *common, "--min-severity", "high", cache=tmp_path / "c", cwd=tmp_path)
    assert high.returncode == 1
    assert [f["cwe"] for f in json.loads(high.stdout)["findings"]] == [787]

    critical = k3lsp("audit", "proj", "--endpoint", corpus_daemon.endpoint, "--min-severity", "critical",
                     "--format", "sarif", cache=tmp_path / "c", cwd=tmp_path)  # fmt: skip
    assert critical.returncode == 0, critical.stderr
    run = valid_sarif(critical.stdout)["runs"][0]
    assert run["results"] == [] and run["invocations"][0]["exitCode"] == 0


def test_clean_tree_exits_0_and_non_c_and_excluded_files_are_not_audited(corpus_daemon, tmp_path):
    corpus.tree(tmp_path)
    clean = k3lsp("audit", "proj/lib", "proj/build", "--endpoint", corpus_daemon.endpoint, "--json",
                  cache=tmp_path / "c", cwd=tmp_path)  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    stats = json.loads(clean.stdout)["stats"]
    assert (stats["files"], stats["units"], stats["findings"]) == (1, 2, 0)  # util.c only: NOTES.txt, build/ skipped


def test_unreachable_backend_exits_2_and_sarif_records_the_failed_invocation(tmp_path):
    corpus.tree(tmp_path)
    endpoint = nowhere(tmp_path)
    result = k3lsp("audit", "proj", "--endpoint", endpoint, "--format", "sarif", cache=tmp_path / "c", cwd=tmp_path)
    assert result.returncode == 2
    assert f"{endpoint} is not reachable" in result.stderr
    invocation = valid_sarif(result.stdout)["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
    texts = [n["message"]["text"] for n in invocation["toolExecutionNotifications"] if n["level"] == "error"]
    assert any(f"{endpoint} is not reachable" in t for t in texts)
    assert any(f"{corpus.UNITS} of {corpus.UNITS} units not audited" in t for t in texts)


def test_bad_arguments_exit_2_before_any_work(corpus_daemon, tmp_path):
    corpus.tree(tmp_path)
    missing = k3lsp("audit", "proj", "nope.c", "--endpoint", corpus_daemon.endpoint, cache=tmp_path / "c",
                    cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 2 and "nope.c: no such file or directory" in missing.stderr
    no_jobs = k3lsp("audit", "proj", "--endpoint", corpus_daemon.endpoint, "--jobs", "0", cache=tmp_path / "c",
                    cwd=tmp_path)  # fmt: skip
    assert no_jobs.returncode == 2 and "--jobs must be at least 1" in no_jobs.stderr
    bad_endpoint = k3lsp("audit", "proj", "--endpoint", "http://x", cache=tmp_path / "c", cwd=tmp_path)
    assert bad_endpoint.returncode == 2 and "--endpoint http://x" in bad_endpoint.stderr
    unwritable = k3lsp("audit", "proj", "--endpoint", corpus_daemon.endpoint, "-o", str(tmp_path / "no" / "x.sarif"),
                       cache=tmp_path / "c", cwd=tmp_path)  # fmt: skip
    assert unwritable.returncode == 2 and "cannot write" in unwritable.stderr


def test_a_unit_that_cannot_be_sent_is_an_error_not_a_hang(corpus_daemon, tmp_path):
    """A file named on the command line skips maxFileBytes; one function over the frame limit cannot be
    encoded: that unit fails, the others are audited and the run ends."""
    corpus.tree(tmp_path)
    big = tmp_path / "big.c"
    big.write_text('int big(void)\n{\n\treturn sizeof "' + "A" * (9 * 1024 * 1024) + '";\n}\n')
    result = k3lsp("audit", "proj", "big.c", "--endpoint", corpus_daemon.endpoint, "--json", cache=tmp_path / "c",
                   cwd=tmp_path, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    body = json.loads(result.stdout)
    (error,) = [e for e in body["errors"] if "big" in e]
    assert error.startswith("big.c: big: not audited (protocol):") and "frame limit" in error, body["errors"]
    assert {f["cwe"] for f in body["findings"]} == {787, 125, 457}  # the other units were audited
