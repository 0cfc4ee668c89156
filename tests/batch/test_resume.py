"""An interrupted `k3lsp audit` loses nothing already audited: each unit is cached as it finishes, and a
rerun sends only the rest to the daemon (counted by the daemon itself and by the stats)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from tests.batch import corpus
from tests.support.batch import cached_units, k3lsp, start_k3lsp, stats
from tests.support.daemon import Wire

FILES = 8


async def daemon_requests(endpoint: str) -> int:
    async with Wire(endpoint, timeout=10) as wire:
        return (await wire.ask("status", "s"))["status"]["requests"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_keeps_finished_units_and_a_rerun_audits_only_the_rest(slow_pair, tmp_path, sig):
    daemon = slow_pair[0]
    corpus.slow_tree(tmp_path, FILES)
    cache = tmp_path / "c"
    args = ("audit", "slow", "--endpoint", daemon.endpoint, "--jobs", "1", "--json")
    proc = start_k3lsp(*args, cache=cache, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while cached_units(cache) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "the run finished before it could be interrupted"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 128 + sig, err  # 130 or 143, as a shell reports a command a signal ended
    assert "interrupted:" in err and "a rerun audits only the rest" in err
    first = stats(out)
    kept = cached_units(cache)
    assert first["interrupted"] is True
    assert 2 <= kept < FILES and first["audited"] == kept  # every finished unit was stored, nothing else

    before = asyncio.run(daemon_requests(daemon.endpoint))
    rerun = k3lsp(*args, cache=cache, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    second = stats(rerun)
    assert (second["cached"], second["audited"], second["units"]) == (kept, FILES - kept, FILES)
    assert asyncio.run(daemon_requests(daemon.endpoint)) - before == FILES - kept
