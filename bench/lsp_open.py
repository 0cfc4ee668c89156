"""didOpen -> first diagnostics with the daemon down: how long an editor waits for the findings the cache holds.

    uv run python bench/lsp_open.py TREE [--rounds 5] [--against OLD_CHECKOUT]
    uv run python bench/lsp_open.py --quick          # the demo corpus, two rounds

The language server runs on the fake daemon of the logic tests (tests/support/fake_daemon.py). A first session,
the daemon up, audits the measured files so the result cache holds a finding in each (the first unit of each
file is scripted one); then each round is a new server over that cache with the daemon down, which opens
the first file right after ``initialized`` (**first**), then ordinary files (**ordinary**: 5-60 kB), then the
largest admitted files (**large**: 0.8 MB and up, under maxFileBytes), one at a time, each timed from its
didOpen to the publishDiagnostics carrying its finding. Printed: p50 and max per kind, the server's CPU seconds
per round, and the load average before and after. Rounds after the first find each file's split kept by the
earlier ones (k3lsp.core.splits; the first round starts with none kept): each kind is printed for a split kept
(``split kept``) and not (``split new``), with `ratio <kind>_p50_kept_over_new_split`.

``--against OLD_CHECKOUT`` (e.g. a `git archive` of an older commit) runs the same rounds on that code too,
alternating with this checkout's, and prints `ratio <kind>_split_<kept|new>_p50_new_over_old`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lsprotocol import types as lsp  # noqa: E402

from k3lsp.core import options  # noqa: E402
from k3lsp.units import split as units  # noqa: E402
from tests.support import kimi  # noqa: E402
from tests.support.fake_daemon import FakeScript  # noqa: E402
from tests.support.lsp import editor  # noqa: E402

ORDINARY = (5_000, 60_000)
LARGE = 800_000
WAIT = 120.0


KINDS = ("first", "ordinary", "large")


@dataclass
class Figures:
    """Seconds per kind of file, with its split kept by an earlier session or not (``split``: ``kept``, ``new``)."""

    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    cpu: list[float] = field(default_factory=list)


def pick(tree: Path, ordinary: int, large: int) -> tuple[list[Path], list[Path]]:
    """The first file and ordinary files, spread over the tree, and the largest admitted ones (>= LARGE bytes)."""
    files = list(options.admitted_files(tree, tree, options.Options()))
    sized = [(p, p.stat().st_size) for p in files]
    middling = [p for p, s in sized if ORDINARY[0] <= s <= ORDINARY[1]] or [p for p, _ in sized]
    step = max(1, len(middling) // (ordinary + 1))
    chosen = [p for p in middling[::step] if split_of(p)][: ordinary + 1]
    big = [p for p, s in sorted(sized, key=lambda ps: -ps[1]) if s >= LARGE and split_of(p)][:large]
    return chosen, big


def split_of(path: Path) -> tuple[units.Unit, ...]:
    """A file's units (a file with none shows no finding: it is not measured)."""
    return units.split(path.read_text(encoding="utf-8", errors="replace"))


def script(tree: Path, files: list[Path]) -> dict:
    """A finding in the first unit of each file (lines relative to the unit)."""
    out = {}
    for path in files:
        split = split_of(path)
        if split:
            out[split[0].name] = {"findings": [kimi.finding(start_line=1, end_line=1, trace=[])]}
    return {"units": out}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


async def seed(tree: Path, files: list[Path], fake: FakeScript, cache: Path, env: dict) -> None:
    async with editor(tree, fake=fake, cache_dir=cache, env=env) as ed:
        for path in files:
            uri = ed.open(path.relative_to(tree).as_posix())
            await ed.command("k3lsp.auditFile", uri, timeout=3600)


async def round_(
    tree: Path, files: list[Path], fake: FakeScript, cache: Path, env: dict, into: Figures, kinds: list[str], split: str
) -> None:
    loop = asyncio.get_running_loop()
    async with editor(tree, fake=fake, cache_dir=cache, env=env) as ed:
        features = ed.client.protocol.fm.features
        recorded = features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]
        shown: dict[str, asyncio.Future] = {}

        def on_publish(params: lsp.PublishDiagnosticsParams) -> None:  # timed as it arrives, not by polling
            waiting = shown.get(params.uri)
            if params.diagnostics and waiting is not None and not waiting.done():
                waiting.set_result(loop.time())
            recorded(params)

        features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish
        for path, kind in zip(files, kinds, strict=True):
            uri = ed.uri(path.relative_to(tree).as_posix())
            shown[uri] = loop.create_future()
            start = loop.time()
            ed.open(path.relative_to(tree).as_posix())
            into.times.setdefault((kind, split), []).append(await asyncio.wait_for(shown[uri], WAIT) - start)
            ed.client.text_document_did_close(
                lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
            )
        into.cpu.append(cpu_seconds(ed.client._server.pid))


def ms(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms ({len(values)})"


async def run(tree: Path, rounds: int, ordinary: int, large: int, against: Path | None) -> None:
    middling, big = pick(tree, ordinary, large)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "tree"  # the chosen files alone: a workspace holding the whole tree would have its
        for path in middling + big:  # symbol index built by the seeding audits, which is not what is measured here
            (copy / path.relative_to(tree)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy / path.relative_to(tree))
        moved = [copy / p.relative_to(tree) for p in middling], [copy / p.relative_to(tree) for p in big]
        await measure(copy, *moved, rounds, against)


async def measure(tree: Path, middling: list[Path], big: list[Path], rounds: int, against: Path | None) -> None:
    files = middling + big
    kinds = ["first"] + ["ordinary"] * (len(middling) - 1) + ["large"] * len(big)
    shown = [(p, k) for p, k in zip(files, kinds, strict=True) if k != "ordinary"]
    print(f"files: {len(files)}; " + ", ".join(f"{k} {p.relative_to(tree)} ({p.stat().st_size:,} B)" for p, k in shown))
    codes = {"new": REPO} | ({"old": against.resolve()} if against else {})
    figures = {name: Figures() for name in codes}
    with tempfile.TemporaryDirectory() as scratch:
        up, down = FakeScript(Path(scratch) / "up.json"), FakeScript(Path(scratch) / "down.json")
        up.write(script(tree, files))
        down.write({"state": "unreachable"})
        here = os.getcwd()
        os.chdir(scratch)  # `python -m` puts the current folder first on the server's path
        try:
            for name, code in codes.items():
                cache = Path(scratch) / f"cache-{name}"
                await seed(tree, files, up, cache, {"PYTHONPATH": str(code)})
            for n in range(rounds):
                for name, code in codes.items():
                    cache = Path(scratch) / f"cache-{name}"
                    if n == 0:  # the first round opens each file with no split kept (the seeding session kept them)
                        for kept in cache.glob("splits.sqlite3*"):
                            kept.unlink()
                    split = "new" if n == 0 else "kept"
                    await round_(tree, files, down, cache, {"PYTHONPATH": str(code)}, figures[name], kinds, split)
        finally:
            os.chdir(here)
    for name, fig in figures.items():
        print(f"== {name} code ({codes[name]})")
        for (kind, split), values in sorted(fig.times.items(), key=lambda ks: (KINDS.index(ks[0][0]), ks[0][1])):
            print(f"{kind}, split {split}: {ms(values)}")
        print(f"server CPU per round: p50 {statistics.median(fig.cpu):.2f} s, max {max(fig.cpu):.2f} s")
    times = figures["new"].times
    for kind in KINDS:  # this code's own peer, in the same run: the same files opened with no split kept
        if times.get((kind, "kept")) and times.get((kind, "new")):
            ratio = statistics.median(times[kind, "kept"]) / statistics.median(times[kind, "new"])
            print(f"ratio {kind}_p50_kept_over_new_split = {ratio:.2f}")
    if against is not None:
        for key in sorted(figures["new"].times):
            old, new = figures["old"].times.get(key), figures["new"].times[key]
            if old:
                ratio = statistics.median(new) / statistics.median(old)
                print(f"ratio {key[0]}_split_{key[1]}_p50_new_over_old = {ratio:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path)
    parser.add_argument("--quick", action="store_true", help="the demo corpus (examples/), two rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ordinary", type=int, default=8, help="ordinary files per round")
    parser.add_argument("--large", type=int, default=3, help="large files per round")
    parser.add_argument("--against", type=Path, help="an older checkout to measure in the same run")
    args = parser.parse_args(argv)
    if args.quick == (args.tree is not None):
        parser.error("give a TREE or --quick")
    print(
        f"load average {os.getloadavg()}; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        tree = args.tree.resolve() if args.tree else Path(shutil.copytree(REPO / "examples", Path(scratch) / "t"))
        rounds = 2 if args.quick else args.rounds
        asyncio.run(run(tree, rounds, args.ordinary, args.large, args.against))
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
