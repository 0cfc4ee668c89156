"""Prefill efficiency of a whole-file audit: the tokens the daemon reads, against the file read once.

For each file, X = (file tokens + one system/tools prompt) / tokens actually prefilled, printed as
`ratio prefill_ideal_over_actual[FILE] = X`, and the smallest of them as `ratio prefill_ideal_over_actual = X`.
Higher is better; the target is >= 0.9. X can exceed 1: top-level comments are not sent to the model.

Files (real C code, none written here; origins and licences in bench/corpus/README.md): the 10,000-line slice
of sqlite3.c that bench/lsp_incremental.py uses (lines 150,001-160,000, fetched once with
`npm pack better-sqlite3@12`), zlib's examples/gzlog.c and gzread.c, libpng's pngtest.c.

How: builds the tiny checkpoint; for each file starts a fresh `k3-backend serve --script` (every unit is
answered "no findings" through the real engine, so nothing depends on the random model) and audits the file
whole with `k3lsp.cli.batch.audit_paths`, the code behind `k3lsp audit` (the same units and contexts, 4 units in
flight), on an empty result cache. Tokens actually prefilled = the daemon's prompt tokens less those served
from its prompt cache, over the whole audit (its `status`). File tokens: the daemon's tokenizer on the file
text; the system/tools prompt: the rendered audit prompt up to its first segment. With `--compare` every file
is also audited with each unit sending its own context (the layout before the shared file context), in the
same run, as the peer.

Run: `uv run python bench/prefill_efficiency.py [--compare] [--slice-lines 10000]` (~10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support and bench helpers (run as a script from anywhere)
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

import platformdirs  # noqa: E402
from lsp_incremental import SLICE_START, fetch_sqlite  # noqa: E402

from backend import prompts  # noqa: E402
from backend.dist import load_tokenizer  # noqa: E402
from backend.tiny import make_tiny  # noqa: E402
from k3lsp.cli import batch  # noqa: E402
from k3lsp.core.client import ClientOptions, DaemonClient  # noqa: E402
from k3lsp.core.options import Options  # noqa: E402
from k3lsp.units import split as units  # noqa: E402
from k3lsp.wire.cache import ResultCache  # noqa: E402
from tests.support.daemon import serving  # noqa: E402

CORPUS = REPO / "bench" / "corpus"
FILES = [CORPUS / "zlib" / "gzlog.c", CORPUS / "zlib" / "gzread.c", CORPUS / "libpng" / "pngtest.c"]
SCRIPT = [{"unit": "*", "turns": ["no findings"]}]
TARGET = 0.9


def sqlite_slice(tmp: Path, lines: int) -> Path:
    text = fetch_sqlite(Path(platformdirs.user_cache_dir("k3lsp")) / "bench").read_text(errors="surrogateescape")
    path = tmp / "sqlite3_slice.c"
    path.write_text("\n".join(text.split("\n")[SLICE_START : SLICE_START + lines]), errors="surrogateescape")
    return path


@contextlib.contextmanager
def own_contexts(enabled: bool) -> Iterator[None]:
    """Every unit sends its own context (a file context cap of 0): the layout before the shared one."""
    cap = units.MAX_FILE_CONTEXT_CHARS
    units.MAX_FILE_CONTEXT_CHARS = 0 if enabled else cap
    units.split.cache_clear()
    try:
        yield
    finally:
        units.MAX_FILE_CONTEXT_CHARS = cap
        units.split.cache_clear()


async def engine_counters(endpoint: str) -> tuple[int, int]:
    async with DaemonClient(ClientOptions(endpoint=endpoint)) as client:
        engine = (await client.status())["engine"]
    return engine.get("prompt_tokens", 0), engine.get("cached_tokens", 0)  # none before the first step


async def audit(path: Path, endpoint: str, tmp: Path) -> tuple[int, int]:
    """(units audited, tokens prefilled) for one whole-file audit on a fresh daemon."""
    prompt0, cached0 = await engine_counters(endpoint)
    cache = ResultCache(tmp / f"results-{time.monotonic_ns()}.sqlite3")
    report = await batch.audit_paths([path], Options(endpoint=endpoint), cache, endpoints=[endpoint], jobs=4)
    if report.errors or report.counters.audited != report.units:
        raise RuntimeError(f"{path.name}: {report.counters.audited} of {report.units} units audited: {report.errors}")
    prompt1, cached1 = await engine_counters(endpoint)
    return report.units, (prompt1 - prompt0) - (cached1 - cached0)


def ideal(tokenizer, path: Path) -> tuple[int, int]:
    """(file tokens, system/tools prompt tokens), the prompt at the effort `k3lsp audit` sends (background)."""
    text = path.read_text(errors="surrogateescape")
    messages = prompts.audit_messages(
        path=path.name, unit="u", code="int u(void)\n{\n}", context="x", specials=prompts.special_strings(tokenizer)
    )
    system = prompts.render(tokenizer, messages, prompts.AUDIT_TOOLS, Options().effort("background")).segments[0]
    return len(tokenizer.encode(text, add_special_tokens=False)), system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", action="store_true", help="also audit with per-unit contexts (the peer)")
    parser.add_argument("--slice-lines", type=int, default=10_000, help="lines of sqlite3.c from line 150,001")
    parser.add_argument("--quick", action="store_true", help="one small file of the corpus (what tests/bench runs)")
    args = parser.parse_args()
    layouts = ["shared", "own"] if args.compare else ["shared"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="k3prefill-") as tmp_name:
        tmp = Path(tmp_name)
        model = make_tiny(tmp / "tiny")
        tokenizer = load_tokenizer(str(model), trust_remote_code=True)
        for path in FILES[:1] if args.quick else [sqlite_slice(tmp, args.slice_lines), *FILES]:
            file_tokens, system = ideal(tokenizer, path)
            for layout in layouts:
                with own_contexts(layout == "own"), serving(model, script=SCRIPT, args=["--max-tokens", "64"]) as d:
                    tic = time.perf_counter()
                    n_units, prefilled = asyncio.run(audit(path, d.endpoint, tmp))
                    seconds = time.perf_counter() - tic
                x = (file_tokens + system) / prefilled
                rows.append((path.name, layout, n_units, file_tokens, system, prefilled, x, seconds))
                print(
                    f"  {path.name:18s} {layout:6s} {n_units:4d} units  file {file_tokens:7,d} + system {system:,d}"
                    f"  prefilled {prefilled:7,d}  X {x:.3f}  ({seconds:.0f} s)",
                    flush=True,
                )
    print(
        f"machine: {os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; tiny checkpoint tokenizer"
    )
    shared = [r for r in rows if r[1] == "shared"]
    for name, _, _, _, _, _, x, _ in shared:
        print(f"ratio prefill_ideal_over_actual[{name}] = {x:.3f}")
    if args.compare:
        for name, _, _, _, _, _, x, _ in (r for r in rows if r[1] == "own"):
            print(f"peer (own contexts) prefill_ideal_over_actual[{name}] = {x:.3f}")
    worst = min(r[6] for r in shared)
    print(f"ratio prefill_ideal_over_actual = {worst:.3f}  (smallest of {len(shared)} files; target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
