"""Several `--endpoint`s: the units of one audit are spread over real daemons through a shared queue, and a
daemon that dies mid-run has its units finished by the others, with a clear message."""

from __future__ import annotations

import asyncio
import json
import time

from backend.launch import stop
from tests.batch import corpus
from tests.batch.test_resume import daemon_requests
from tests.support.batch import cached_units, k3lsp, start_k3lsp
from tests.support.daemon import Wire, serving

FILES = 8


def test_two_backends_share_the_work(slow_pair, tmp_path):
    a, b = slow_pair
    corpus.slow_tree(tmp_path, FILES)
    before = [asyncio.run(daemon_requests(d.endpoint)) for d in (a, b)]
    result = k3lsp("audit", "slow", "--endpoint", a.endpoint, "--endpoint", b.endpoint, "--jobs", "1", "--json",
                   cache=tmp_path / "c", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)["stats"]
    shares = stats["backends"]
    assert set(shares) == {a.endpoint, b.endpoint} and all(n > 0 for n in shares.values())
    assert sum(shares.values()) == stats["audited"] == FILES
    after = [asyncio.run(daemon_requests(d.endpoint)) for d in (a, b)]
    on_daemons = [x - y for x, y in zip(after, before, strict=True)]
    assert on_daemons == [shares[a.endpoint], shares[b.endpoint]]  # each daemon saw exactly its share

    text = k3lsp("audit", "slow", "--endpoint", a.endpoint, "--endpoint", b.endpoint, cache=tmp_path / "c2",
                 cwd=tmp_path)  # fmt: skip
    assert f"audited on {a.endpoint}: " in text.stdout and f"{b.endpoint}: " in text.stdout


def test_a_backend_dying_mid_run_has_its_units_finished_by_the_other(slow_pair, tiny_model, tmp_path):
    survivor = slow_pair[0]
    corpus.slow_tree(tmp_path, FILES)
    cache = tmp_path / "c"
    with serving(tiny_model, script=corpus.SLOW_SCRIPT) as doomed:
        proc = start_k3lsp("audit", "slow", "--endpoint", doomed.endpoint, "--endpoint", survivor.endpoint,
                           "--jobs", "1", "--json", cache=cache, cwd=tmp_path)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while cached_units(cache) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert proc.poll() is None, "the run finished before a backend could fail"
            stop(doomed.proc)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, err
    warning = next(line for line in err.splitlines() if "warning: k3 audit backend" in line)
    assert doomed.endpoint in warning and f"its units go to {survivor.endpoint}" in warning
    body = json.loads(out)
    assert body["errors"] == [] and len(body["warnings"]) == 1
    assert body["stats"]["audited"] == FILES and sum(body["stats"]["backends"].values()) == FILES
    assert cached_units(cache) == FILES


async def daemon_status(endpoint: str) -> dict:
    async with Wire(endpoint, timeout=10) as wire:
        return (await wire.ask("status", "s"))["status"]


def test_jobs_bounds_the_units_in_flight_on_each_backend(tiny_model, tmp_path):
    corpus.slow_tree(tmp_path, 6)
    with serving(tiny_model, script=corpus.SLOW_SCRIPT) as daemon:  # fresh: its batch peak is this run's
        result = k3lsp("audit", "slow", "--endpoint", daemon.endpoint, "--jobs", "2", "--json", cache=tmp_path / "c",
                       cwd=tmp_path)  # fmt: skip
        status = asyncio.run(daemon_status(daemon.endpoint))
    assert result.returncode == 0, result.stderr
    assert status["requests"] == 6
    assert 1 <= status["batch_size_peak"] <= 2  # the default (4) or no bound would batch more of the 6
