"""An audit with nothing changed, through a real `k3lsp` server and a real `k3-backend`.

    uv run python bench/lsp_noop_save.py --file X.c [--runs 20]
    uv run python bench/lsp_noop_save.py --quick     # a small file, 3 runs (what tests/bench runs)

(`bench/lsp_incremental.py` calls `measure` on its 10k-line slice.) Every unit of the file is already in
the result cache under the daemon's result key (entries written up front, as a previous audit
would have), so the audit must not reach the daemon at all: the figure is the server's own overhead, measured
by the client from sending `k3lsp.auditFile` (what a save runs, awaited) to its answer over stdio. (A save
itself is answered by nothing when nothing changed: the server publishes only news.) Target: < 20 ms. The
peer, measured in the same run on the same text, is the bare editor-side work (split + one cache lookup per
unit).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support (run as a script from anywhere)
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)


from backend.tiny import make_tiny  # noqa: E402
from k3lsp.core.client import ClientOptions, DaemonClient  # noqa: E402
from k3lsp.core.options import Options  # noqa: E402
from k3lsp.core.replies import Welcome  # noqa: E402
from k3lsp.units import split as units  # noqa: E402
from k3lsp.wire import cache  # noqa: E402
from k3lsp.wire.address import ResultKey  # noqa: E402
from k3lsp.wire.protocol import Priority  # noqa: E402
from tests.support import kimi  # noqa: E402
from tests.support.daemon import serving  # noqa: E402
from tests.support.lsp import WAIT, editor  # noqa: E402

NO_FINDINGS = [{"unit": "*", "turns": [kimi.turn(content="no findings")]}]


async def _result_key(endpoint: str) -> str:
    """The key the server's cached results are filed under for this daemon (as k3lsp.core.connection files them),
    at the effort of an audit on save."""
    options = ClientOptions(endpoint=endpoint)
    async with DaemonClient(options) as client:
        welcome = Welcome.of(client.welcome)
    assert welcome.fingerprint, "the daemon names no checkpoint fingerprint"
    key = ResultKey(welcome.fingerprint, welcome.prompt_version, client.daemon_identity)
    return key.digest(Options().effort(Priority.INTERACTIVE))


def _fill_cache(cache_dir: Path, source: str, key: str) -> int:
    """Write what an earlier audit would have left: one (empty) result per unit, under the daemon's key."""
    results = cache.ResultCache(cache_dir / cache.FILE_NAME)
    split = units.split(source)
    for unit in split:
        results.put(unit.key, key, [])
    results.close()
    return len(split)


def _domain_ms(cache_dir: Path, source: str, key: str, runs: int) -> float:
    """The peer: the same editor-side work with no server around it (split memoised on the text, as in the
    server, and one cache lookup per unit)."""
    results = cache.ResultCache(cache_dir / cache.FILE_NAME)
    units.split(source)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        assert all(results.get(u.key, key) is not None for u in units.split(source))
        times.append((time.perf_counter() - start) * 1000)
    results.close()
    return statistics.median(times)


async def _server_ms(root: Path, cache_dir: Path, endpoint: str, runs: int) -> list[float]:
    async with editor(root, settings={"endpoint": endpoint}, cache_dir=cache_dir) as ed:
        uri = ed.open("bench.c")
        times = []
        for i in range(runs + 1):  # the first also says hello to the daemon: not counted
            start = time.perf_counter()
            report = await ed.command("k3lsp.auditFile", uri, timeout=WAIT)
            if i:
                times.append((time.perf_counter() - start) * 1000)
            assert report["error"] is None, report
        status = await ed.status()
        assert status["counters"]["sent"] == 0, "an audit with nothing changed reached the daemon"
    return times


def measure(source: str, runs: int = 20) -> dict:
    """Median and p90 of save -> publishDiagnostics (ms) with every unit cached, and the domain-only peer."""
    with tempfile.TemporaryDirectory(prefix="k3-noop-") as tmp:
        tmp_path = Path(tmp)
        model = make_tiny(tmp_path / "tiny")
        root = tmp_path / "ws"
        root.mkdir()
        (root / "bench.c").write_text(source)
        with serving(model, script=NO_FINDINGS) as daemon:
            key = asyncio.run(_result_key(daemon.endpoint))
            n_units = _fill_cache(tmp_path / "cache", source, key)
            times = asyncio.run(_server_ms(root, tmp_path / "cache", daemon.endpoint, runs))
            domain = _domain_ms(tmp_path / "cache", source, key, runs)
    ordered = sorted(times)
    return {
        "units": n_units,
        "median_ms": statistics.median(times),
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
        "domain_ms": domain,
    }


def report(figures: dict, what: str) -> None:
    print(
        f"noop_audit_ms = {figures['median_ms']:.1f}  (p90 {figures['p90_ms']:.1f}; {what}, "
        f"{figures['units']} units all cached, real server over stdio; target < 20)"
    )
    print(
        f"peer_domain_ms = {figures['domain_ms']:.1f}  (same text, same run, no server) "
        f"ratio server_over_domain = {figures['median_ms'] / figures['domain_ms']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, help="the C file (required unless --quick)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="examples/k3demo_syscalls.c, 3 runs")
    args = parser.parse_args()
    if args.quick:
        args.file, args.runs = REPO / "examples" / "k3demo_syscalls.c", 3
    elif args.file is None:
        parser.error("--file is required (or --quick)")
    report(measure(args.file.read_text(encoding="utf-8", errors="replace"), args.runs), args.file.name)


if __name__ == "__main__":
    main()
