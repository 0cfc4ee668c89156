"""Incremental audits on a real large C file: splitting cost and tokens sent after a one-function edit.

    uv run python bench/lsp_incremental.py [--file X.c] [--runs 5]

The file: the SQLite amalgamation `sqlite3.c` (~270k lines, 9.5 MB), taken from the npm tarball of
`better-sqlite3@12` (`npm pack`, so only the npm registry is needed) and cached under
`platformdirs.user_cache_dir("k3lsp")/bench`. `--file` uses any other C file instead.

What it prints:
- `split_10k_ms`: median time of `units.parse` (uncached: what a changed text costs) on a 10,000-line
  slice (lines 150,001-160,000 of sqlite3.c: the query planner, ordinary C), beside tree-sitter's bare
  parse of the same text measured in the same run, and `split_whole_ms` on the whole file.
  Target: 10k < 100 ms.
- tokens, estimated as bytes / 4 (no tokenizer on the editor side; C code averages 3-4.5 bytes per
  token with BPE vocabularies, so bytes / 4 is the right order and the same for both sides of a ratio):
  a whole-file audit sends the file; after editing one function, the server sends only the units whose
  key the result cache does not hold (every unit of the version before the edit was audited) with their
  context. Every function of the slice is edited in turn
  (one line inserted before its closing brace) and the median is reported.
- `ratio token_savings = X`: whole-slice tokens / median tokens sent after a one-function edit
  (target >= 20). The same ratio on the whole file is printed beside it.
- `noop_save_domain_ms`: the editor-side work of a save with nothing changed (split, memoised on the
  text; one cache lookup per unit) on the 10k slice.
- `noop_save_publish_ms` (unless `--no-server`): the end-to-end figure on the same slice, save ->
  publishDiagnostics through a real `k3lsp` server and a real `k3-backend` on the tiny checkpoint, every
  unit already cached (bench/lsp_noop_save.py). Target < 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import platformdirs
from tree_sitter import Parser

from k3lsp.units import split as units
from k3lsp.wire import cache

PACKAGE = "better-sqlite3@12"
MEMBER = "package/deps/sqlite3/sqlite3.c"
SLICE_START, SLICE_LINES = 150_000, 10_000
BYTES_PER_TOKEN = 4


def fetch_sqlite(cache_dir: Path) -> Path:
    """sqlite3.c from the better-sqlite3 npm tarball, downloaded once."""
    target = cache_dir / "sqlite3.c"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["npm", "pack", PACKAGE, "--pack-destination", str(cache_dir), "--silent"],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tarball = cache_dir / out.stdout.strip().splitlines()[-1]
    with tarfile.open(tarball) as tar:
        source = tar.extractfile(MEMBER)
        if source is None:
            raise SystemExit(f"{tarball} has no {MEMBER}")
        target.write_bytes(source.read())
    print(f"fetched {tarball.name} -> {target}")
    return target


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def tokens(text: str) -> int:
    return len(text.encode("utf-8")) // BYTES_PER_TOKEN


def sent_after_edit(source: str, before: list[units.Unit], unit: units.Unit) -> int:
    """Tokens sent after inserting one line before the unit's last line: the units whose key is new (the
    cache holds every unit of the version before), with their context."""
    lines = source.split("\n")
    lines.insert(unit.end_line, "\t(void)0;")
    audited = {u.key for u in before}
    after = units.parse("\n".join(lines)).units
    return sum(tokens(u.text) + tokens(u.context) for u in after if u.key not in audited)


def edit_savings(source: str, sample: int | None) -> tuple[int, list[int]]:
    """(whole-file tokens, tokens sent for each one-function edit)."""
    before = list(units.split(source))
    chosen = before if sample is None else before[:: max(1, len(before) // sample)][:sample]
    return tokens(source), [sent_after_edit(source, before, u) for u in chosen]


def noop_save_ms(source: str, runs: int) -> float:
    """A save with nothing changed, editor side: split (memoised on the text), one cache lookup per unit."""
    with tempfile.TemporaryDirectory() as tmp:
        results = cache.ResultCache(Path(tmp) / "r.sqlite3")
        for u in units.split(source):
            results.put(u.key, "bench-result-key", [])

        def save() -> None:
            assert all(results.get(u.key, "bench-result-key") is not None for u in units.split(source))

        ms = median_ms(save, runs)
        results.close()
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, help="a C file to use instead of sqlite3.c")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--whole-file-edits", type=int, default=5, help="edits sampled on the whole file")
    parser.add_argument("--cache-dir", type=Path, default=Path(platformdirs.user_cache_dir("k3lsp")) / "bench")
    parser.add_argument("--no-server", action="store_true", help="skip the end-to-end save through a real server")
    parser.add_argument("--quick", action="store_true", help="a corpus file, one run (what tests/bench runs)")
    args = parser.parse_args()
    if args.quick:
        args.file, args.runs, args.whole_file_edits = Path(__file__).parent / "corpus" / "zlib" / "gzread.c", 1, 1

    path = args.file or fetch_sqlite(args.cache_dir)
    source = path.read_text(encoding="utf-8", errors="replace")
    lines = source.split("\n")
    start = SLICE_START if len(lines) > SLICE_START + SLICE_LINES else 0
    piece = "\n".join(lines[start : start + SLICE_LINES])
    print(f"file: {path} ({len(lines)} lines, {len(source.encode()) / 1e6:.1f} MB)")

    n_slice = len(units.split(piece))
    n_whole = len(units.split(source))
    # units.parse is the uncached path (what a changed text costs); the peer is tree-sitter's parse alone,
    # measured in the same run, so the ratio holds on a loaded machine.
    parser = Parser(units.C_LANGUAGE)
    data = piece.encode()
    parse_10k = median_ms(lambda: parser.parse(data), args.runs)
    split_10k = median_ms(lambda: units.parse(piece), args.runs)
    whole_runs = max(1, args.runs // 2)
    split_whole = median_ms(lambda: units.parse(source), whole_runs)
    print(
        f"split_10k_ms = {split_10k:.1f}  (lines {start + 1}-{start + SLICE_LINES}, {n_slice} units, "
        f"median of {args.runs}; target < 100)"
    )
    print(f"tree_sitter_parse_10k_ms = {parse_10k:.1f}  ratio split_over_parse = {split_10k / parse_10k:.2f}")
    print(f"split_whole_ms = {split_whole:.0f}  ({n_whole} units, median of {whole_runs})")

    whole, sent = edit_savings(piece, None)
    med = statistics.median(sent)
    p90 = sorted(sent)[int(0.9 * (len(sent) - 1))]
    print(
        f"tokens (bytes/{BYTES_PER_TOKEN}): whole-slice audit = {whole}, after a one-function edit: "
        f"median {med:.0f}, p90 {p90}, max {max(sent)} over {len(sent)} edits"
    )
    file_tokens, file_sent = edit_savings(source, args.whole_file_edits)
    print(f"ratio token_savings = {whole / med:.1f}  (10k-line slice; target >= 20)")
    print(
        f"ratio token_savings_whole_file = {file_tokens / statistics.median(file_sent):.0f}  "
        f"({len(file_sent)} sampled edits)"
    )
    print(f"noop_save_domain_ms = {noop_save_ms(piece, args.runs):.1f}  (split + {n_slice} cache lookups)")
    if not args.no_server:
        import lsp_noop_save  # beside this script; starts the tiny model's daemon and a k3lsp server

        lsp_noop_save.report(lsp_noop_save.measure(piece, max(args.runs, 20)), "10k-line slice")


if __name__ == "__main__":
    main()
