"""Five people audit one repository on one daemon: generated tokens without the daemon's result store and with it.

A team shares one Mac pair, and every editor keeps its own result cache, so without the daemon's store each
person pays the pair for every unit of the repository again. Here five clients (each with its own CurveZMQ
key, its own empty editor cache and its own checkout, in which everyone after the first has changed
``--edits`` functions of their own) audit the same tree one after another through
`k3lsp.cli.batch.audit_paths` (the code behind `k3lsp audit`), once against a daemon started with `--no-store`
and once against one with a store. The figure is the model's work: the sum of `generated_tokens` in every
`done` the clients received (read back from their editor caches, which keep the stats of each unit the model
audited for them; an answer from the store, 0 generated tokens, is shown but not kept there).

Both daemons serve the tiny checkpoint with a script that forces every unit to a complete answer (one
finding, then the end of the message) through the real engine: the tiny model's own random output seldom
ends on its stop token, and only complete audits are stored. On the real model the saving is this figure
times the share of audits that end complete (`k3lsp status` shows it as `stop_rate`).

Prints `ratio team_cache_saving = X`, X = generated tokens without the store / with it (target >= 3).

Run: `uv run python bench/team_cache.py [--people 5] [--files 8] [--edits 1]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
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
from k3lsp.wire import keys  # noqa: E402
from k3lsp.wire.cache import ResultCache  # noqa: E402
from tests.support import kimi  # noqa: E402
from tests.support.daemon import serving  # noqa: E402

SCRIPT = [
    {
        "unit": "*",
        "turns": [
            kimi.turn(
                ("report_finding", kimi.finding(start_line=1, end_line=2)),
                reasoning="the caller decides n and nothing bounds it",
            )
        ],
    }
]


def write_repository(root: Path, files: int, person: int, edits: int) -> int:
    """One person's checkout of a small C tree: ``files`` files of three functions each, of which the person's
    own ``edits`` functions (none for the first person) differ from everyone else's; returns the unit count."""
    src = root / "src"
    src.mkdir(parents=True)
    for f in range(files):
        edited = {(person * edits + k) % (3 * files) for k in range(edits)} if person else set()
        body = "\n".join(
            f"int f{f}_{i}(int n)\n{{\n\treturn n * {i} + {f}{' + 1' * (3 * f + i in edited)};\n}}\n" for i in range(3)
        )
        (src / f"m{f:02d}.c").write_text(body)
    return 3 * files


def generated(cache_file: Path) -> int:
    """The generated tokens of every result a client received (its editor cache keeps the stats of each one the
    model generated; the store's answers generated nothing and are not kept)."""
    with sqlite3.connect(cache_file) as conn:
        rows = conn.execute("SELECT SUM(json_extract(stats, '$.generated_tokens')) FROM results").fetchone()
    return int(rows[0] or 0)


def team_audit(
    checkouts: list[Path], endpoint: str, people: dict[str, Path], server_public: Path, work: Path, units: int
) -> tuple[int, float, list[int]]:
    """Each person audits their checkout with an empty cache of their own; (generated tokens, seconds, per person)."""
    per_person = []
    tic = time.perf_counter()
    for root, (name, secret) in zip(checkouts, people.items(), strict=True):
        cache_file = work / name / "results.sqlite3"
        cache = ResultCache(cache_file)
        options = Options(endpoint=endpoint, server_key=str(server_public), client_key=str(secret))
        report = asyncio.run(batch.audit_paths([root / "src"], options, cache))
        cache.close()
        if report.errors or report.counters.audited != units:
            raise RuntimeError(f"{name}: incomplete audit: {report.errors} ({report.counters.audited}/{units})")
        per_person.append(generated(cache_file))
    return sum(per_person), time.perf_counter() - tic, per_person


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=5)
    parser.add_argument("--files", type=int, default=8, help="C files of three functions each")
    parser.add_argument(
        "--edits", type=int, default=1, help="functions each person after the first has changed in their own checkout"
    )
    parser.add_argument("--quick", action="store_true", help="two people, one file (what tests/bench runs)")
    args = parser.parse_args()
    if args.quick:
        args.people, args.files = 2, 1
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, no GPU; "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    with tempfile.TemporaryDirectory(prefix="k3team-") as tmp:
        tmp = Path(tmp)
        model = make_tiny(tmp / "tiny")
        checkouts = [tmp / f"checkout{p}" for p in range(args.people)]
        for p, checkout in enumerate(checkouts):
            units = write_repository(checkout, args.files, p, args.edits)
        keys.init_server(tmp / "daemon")
        people = {}
        for i in range(args.people):
            public, secret = keys.init_keypair(tmp / "clients", f"person{i}")
            (tmp / "daemon" / "authorized" / f"person{i}.key").write_bytes(public.read_bytes())
            people[f"person{i}"] = secret
        curve = [
            "--server-key",
            str(tmp / "daemon" / "server.key_secret"),
            "--authorized-keys",
            str(tmp / "daemon" / "authorized"),
        ]
        print(
            f"{args.people} people, one repository of {units} units, each person with an empty editor cache "
            f"and, after the first, {args.edits} function(s) of their own changed"
        )
        figures = {}
        for label, store in (("without the store", False), ("with the store", True)):
            with serving(model, script=SCRIPT, args=curve, store=store) as daemon:
                tokens, seconds, per_person = team_audit(
                    checkouts, daemon.endpoint, people, tmp / "daemon" / "server.key", tmp / label, units
                )
            figures[label] = tokens
            print(f"  {label}: {tokens} generated tokens in {seconds:.1f} s (per person: {per_person})")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"ratio team_cache_saving = {figures['without the store'] / max(1, figures['with the store']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
