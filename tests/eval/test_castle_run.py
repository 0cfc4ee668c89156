"""`k3lsp eval castle` end to end: a real `k3-backend serve --script` on the tiny checkpoint whose answers are an
oracle for a small CASTLE-format dataset (tests/eval/castle_data.py), and the report's numbers against the ones
worked out by hand; a noisy oracle's false positives; `--matrix effort=low,high`; a rerun that measures and one
that resumes; and nothing of the labels (nor the dataset's own prompt) in what the model was shown."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time

import pytest

from k3lsp.wire.cache import FILE_NAME, ResultCache
from tests.batch import corpus
from tests.eval import castle_data as data
from tests.support.batch import k3lsp, start_k3lsp
from tests.support.daemon import Wire, serving

ARGS = ["--max-tokens", "4000"]
UNITS = 7  # six programs; find_user's has two functions


@pytest.fixture(scope="module")
def oracle(tiny_model):
    with serving(tiny_model, script=data.oracle_script(), args=ARGS) as d:
        yield d


@pytest.fixture(scope="module")
def noisy(tiny_model):
    with serving(tiny_model, script=data.noisy_script(), args=ARGS) as d:
        yield d


async def _requests(endpoint: str) -> int:
    async with Wire(endpoint, timeout=10) as wire:
        return (await wire.ask("status", "s"))["status"]["requests"]


def requests(daemon) -> int:
    return asyncio.run(_requests(daemon.endpoint))


def evaluate(daemon, tmp_path, *extra: str, out: str = "out"):
    dataset = data.write(tmp_path / "castle.json", data.dataset())
    args = ("eval", "castle", str(dataset), "--endpoint", daemon.endpoint, "--out", str(tmp_path / out), *extra)
    done = k3lsp(*args, cache=tmp_path / "user-cache", cwd=tmp_path)
    report = (
        json.loads((tmp_path / out / "report.json").read_text()) if (tmp_path / out / "report.json").exists() else None
    )
    return done, report


def counts(configuration: dict) -> dict:
    return {k: configuration["score"][k] for k in ("tp", "tn", "fp", "fn", "bonus", "score")}


def test_an_oracle_scores_the_hand_computed_numbers_and_the_model_never_sees_a_label(oracle, tmp_path):
    done, report = evaluate(oracle, tmp_path)
    assert done.returncode == 0, done.stderr
    (c,) = report["configurations"]
    assert counts(c) == data.ORACLE
    assert c["summary"]["units"] == UNITS and c["summary"]["audited"] == UNITS and c["errors"] == []
    assert {t["id"]: (t["tp"], t["tn"], t["fp"], t["fn"]) for t in c["tests"]} == {
        "22-1": (1, 0, 0, 0), "787-1": (1, 0, 0, 0), "416-1": (1, 0, 0, 0),
        "22-2": (0, 1, 0, 0), "787-2": (0, 1, 0, 0), "476-1": (1, 0, 0, 0),
    }  # fmt: skip
    by_cwe = {row["cwe"]: (row["tp"], row["fn"]) for row in c["by_cwe"]}
    assert by_cwe == {22: (1, 0), 416: (1, 0), 476: (1, 0), 787: (1, 0)}
    assert c["cost"]["units"] == UNITS and c["cost"]["generated_tokens"] > 0 and c["cost"]["prompt_tokens"] > 0
    assert report["dataset"]["ids"] == [case.id for case in data.CASES]
    assert report["perfect"]["score"] == data.ORACLE["score"] and report["no_findings"]["score"] == 4
    assert c["daemon"]["random_weights"] is True and report["random_weights"] is True
    assert c["thinking_effort"] == "high"  # a batch run's default

    md = done.stdout
    assert md.startswith("# CASTLE") and "**Random weights.**" in md.split("##")[0]
    assert "| **k3lsp: default** | this run | 4 | 2 | 0 | 0 | 100 % | 100 % | 100 % | 49 |" in md
    assert "| `ESBMC` |" not in md and "| ESBMC | 7.8.1 | 53 | 99 | 12 | 97 | 82 % | 35 % | 58 % | 697 |" in md
    assert (tmp_path / "out" / "report.md").read_text() == md
    for png in ("castle-score.png", "castle-cwe-recall.png"):
        assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    shown = json.dumps([s for case in data.CASES for s in oracle.sessions(case.function)])
    names = {t["program"] for t in c["tests"]}
    assert all(re.fullmatch(r"[0-9a-f]{16}\.c", n) for n in names) and all(n in shown for n in names)
    assert data.PROMPT_MARKER not in shown and "DESCRIPTION-OF-" not in shown and "CASTLE-" not in shown
    assert not any(f'"{case.id}"' in shown or f"{case.id}.c" in shown for case in data.CASES)


def test_a_noisy_oracle_shows_its_false_positives(noisy, tmp_path):
    done, report = evaluate(noisy, tmp_path)
    assert done.returncode == 0, done.stderr
    (c,) = report["configurations"]
    assert counts(c) == data.NOISY
    safe = next(t for t in c["tests"] if t["id"] == "22-2")
    assert [(f["cwe"], f["severity"], f["matched"]) for f in safe["findings"]] == [(561, "medium", False)]  # low: gone
    found = next(t for t in c["tests"] if t["id"] == "787-1")
    assert sorted((f["cwe"], f["matched"]) for f in found["findings"]) == [(561, False), (787, True)]
    assert "| **k3lsp: default** | this run | 4 | 0 | 6 | 0 | 40 % | 100 % | 40 % | 39 |" in done.stdout


def test_a_matrix_runs_each_effort_on_the_same_units_and_prints_a_row_each(oracle, tmp_path):
    done, report = evaluate(oracle, tmp_path, "--matrix", "effort=low,high")
    assert done.returncode == 0, done.stderr
    assert [c["name"] for c in report["configurations"]] == ["effort=low", "effort=high"]
    assert [c["settings"] for c in report["configurations"]] == [{"thinkingEffort": "low"}, {"thinkingEffort": "high"}]
    assert all(counts(c) == data.ORACLE and c["summary"]["audited"] == UNITS for c in report["configurations"])
    table = done.stdout.split("## Configurations")[1].split("##")[0]
    rows = [line for line in table.splitlines() if line.startswith("| effort=")]
    assert [r.split(" | ")[0] for r in rows] == ["| effort=low", "| effort=high"]
    assert [s["thinking_effort"] for s in oracle.sessions("copy_name")][-2:] == ["low", "high"]


def test_a_rerun_audits_everything_again_and_resume_takes_what_was_done(oracle, tmp_path):
    first, _ = evaluate(oracle, tmp_path)
    assert first.returncode == 0, first.stderr
    before = requests(oracle)
    again, report = evaluate(oracle, tmp_path)
    assert again.returncode == 0 and report["configurations"][0]["summary"]["audited"] == UNITS
    assert requests(oracle) - before == UNITS  # measured again: nothing from the cache
    before = requests(oracle)
    resumed, report = evaluate(oracle, tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    (c,) = report["configurations"]
    assert (c["summary"]["resumed"], c["summary"]["audited"], counts(c)) == (UNITS, 0, data.ORACLE)
    assert c["cost"]["generated_tokens"] > 0  # what the resumed units cost, as their results recorded it
    assert requests(oracle) == before
    assert not (tmp_path / "user-cache" / FILE_NAME).exists()  # the user's own result cache is never written


def test_a_bad_dataset_or_matrix_is_refused_with_a_clear_error(oracle, tmp_path):
    (tmp_path / "bad.json").write_text('{"tests": []}')
    done = k3lsp("eval", "castle", str(tmp_path / "bad.json"), cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 2 and "non-empty list 'tests'" in done.stderr
    done, _ = evaluate(oracle, tmp_path, "--matrix", "effort=medium")
    assert done.returncode == 2 and "--matrix effort: values are off, low, high, max, not medium" in done.stderr


def test_castle_refuses_the_kconfig_flags_it_could_not_honour_and_fixes_takes_them(tmp_path):
    """CASTLE's cases are no kernel tree: --only-built and --kconfig were accepted there and did nothing (issue 42);
    `eval fixes` reviews a kernel's commits and honours them. No daemon: both end at the command line's checks."""
    dataset = data.write(tmp_path / "castle.json", data.dataset())
    for flags in (["--only-built"], ["--kconfig", ".config"]):
        done = k3lsp("eval", "castle", str(dataset), *flags, cache=tmp_path / "c", cwd=tmp_path)
        assert done.returncode == 2 and f"unrecognized arguments: {' '.join(flags)}" in done.stderr, done.stderr
    done = k3lsp("eval", "fixes", "--repo", str(tmp_path), "--only-built", cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 2 and "--only-built needs --kconfig" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def slow(tiny_model):
    with serving(tiny_model, script=corpus.SLOW_SCRIPT) as d:
        yield d


def run_cache_entries(path) -> int:
    if not path.exists():
        return 0
    cache = ResultCache(path)
    try:
        return cache.stats()["entries"]
    finally:
        cache.close()


def test_an_interrupted_run_keeps_what_finished_and_resume_audits_only_the_rest(slow, tmp_path):
    dataset = data.write(tmp_path / "castle.json", data.dataset())
    out = tmp_path / "out"
    args = ("eval", "castle", str(dataset), "--endpoint", slow.endpoint, "--out", str(out), "--jobs", "1")
    proc = start_k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while run_cache_entries(out / "cache" / "default.sqlite3") < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130 and "interrupted by SIGINT" in err and "--resume" in err
    assert not (out / "report.json").exists()
    kept = run_cache_entries(out / "cache" / "default.sqlite3")
    assert 2 <= kept < UNITS
    before = requests(slow)
    done = k3lsp(*args, "--resume", cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "report.json").read_text())["configurations"][0]["summary"]
    assert (summary["resumed"], summary["audited"]) == (kept, UNITS - kept)
    assert requests(slow) - before == UNITS - kept
