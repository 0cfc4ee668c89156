"""`k3lsp audit` on one backend against the same audit spread over two: wall time and speedup.

Issue 8's claim is that a workspace audit on two Mac pairs finishes in about half the time. Here both
"pairs" are tiny-checkpoint daemons (`k3-backend serve --script`, every unit forced to the same number of
generated tokens through the real engine) on THIS machine, so they compete for the same CPU cores: the
figure measures the batch tool's work sharing plus whatever parallelism the cores leave, not the Macs.
On a 2-core machine expect well under 2x; the script prints the core count and load beside the ratio.

Each run audits a fresh set of units (new function bodies, an empty result cache) through
`k3lsp.cli.batch.audit_paths`, the code behind `k3lsp audit`; runs alternate one backend / two backends /
one backend with twice the jobs (the same number of units in flight as two backends) REPEATS times and
the median of each is reported. Prints `ratio two_backends_speedup = X` (one-backend time over two).

Run: `uv run python bench/batch_two_backends.py [--units 32] [--tokens 200] [--jobs 2] [--repeats 5]`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
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
from k3lsp.cli import batch  # noqa: E402
from k3lsp.core.options import Options  # noqa: E402
from k3lsp.wire.cache import ResultCache  # noqa: E402
from tests.support.daemon import serving  # noqa: E402

# 40 distinct words: a period the loop guard ignores, so every unit generates exactly --tokens tokens.
LONG_PERIOD = " ".join(f"w{i}" for i in range(40)) + " "


def write_units(folder: Path, count: int, salt: int) -> None:
    """``count`` one-function C files whose text (and so cache key) is new for every ``salt``."""
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"u{i:03d}.c").write_text(f"int f{i}(int a)\n{{\n\treturn a * {salt} + {i};\n}}\n")


def audit(folder: Path, endpoints: list[str], jobs: int, units: int) -> float:
    """Wall seconds of one batch audit with an empty cache; raises if any unit was not audited."""
    with tempfile.TemporaryDirectory(prefix="k3b-cache-") as cache_dir:
        cache = ResultCache(Path(cache_dir) / "results.sqlite3")
        tic = time.perf_counter()
        report = asyncio.run(batch.audit_paths([folder], Options(), cache, endpoints=endpoints, jobs=jobs))
        seconds = time.perf_counter() - tic
        cache.close()
    if report.errors or report.counters.audited != units:
        raise RuntimeError(f"incomplete audit: {report.errors} ({report.counters.audited}/{units} audited)")
    shares = ", ".join(f"{n}" for _, n in sorted(report.by_backend.items()))
    print(f"  {len(endpoints)} backend(s), --jobs {jobs}: {seconds:.2f} s (units per backend: {shares})")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=200, help="generated tokens per unit (forced)")
    parser.add_argument("--jobs", type=int, default=2, help="units in flight per backend")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="4 units of 16 tokens, once (what tests/bench runs)")
    args = parser.parse_args()
    if args.quick:
        args.units, args.tokens, args.repeats = 4, 16, 1

    script = [{"unit": "*", "turns": [{"repeat": LONG_PERIOD, "tokens": args.tokens}]}]
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, no GPU; "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    print(f"{args.units} units x {args.tokens} forced tokens, --jobs {args.jobs} per backend, median of {args.repeats}")
    with tempfile.TemporaryDirectory(prefix="k3b-") as tmp:
        model = make_tiny(Path(tmp) / "tiny")
        with serving(model, script=script) as a, serving(model, script=script) as b:
            write_units(Path(tmp) / "warm", 4, 0)  # JIT and prompt caches warm on both daemons
            audit(Path(tmp) / "warm", [a.endpoint, b.endpoint], args.jobs, 4)
            one, two, one_wide = [], [], []
            salts = itertools.count(1)
            for _ in range(args.repeats):
                for runs, endpoints, jobs in ((one, [a.endpoint], args.jobs),
                                              (two, [a.endpoint, b.endpoint], args.jobs),
                                              (one_wide, [a.endpoint], 2 * args.jobs)):  # fmt: skip
                    salt = next(salts)
                    write_units(Path(tmp) / f"run{salt}", args.units, salt)
                    runs.append(audit(Path(tmp) / f"run{salt}", endpoints, jobs, args.units))
    t_one, t_two, t_wide = (statistics.median(r) for r in (one, two, one_wide))
    print(f"one backend, --jobs {args.jobs}: {t_one:.2f} s")
    print(f"two backends, --jobs {args.jobs} each: {t_two:.2f} s")
    print(f"one backend, --jobs {2 * args.jobs} (same units in flight as two): {t_wide:.2f} s")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"ratio two_backends_speedup = {t_one / t_two:.2f}")
    print(f"ratio two_backends_over_one_wide = {t_wide / t_two:.2f}")
    print("note: both daemons share this machine's cores; on two Mac pairs each backend has its own hardware.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
