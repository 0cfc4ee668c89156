"""Reading a prompt on the CPU: mlx-lm's token loop through the KDA layers against the chunked delta rule
(backend/kda.py), in one process, interleaved, on the same prompts.

For each prompt length, the model reads the prompt after ``--context`` tokens already in its cache (as a tool
result is read after the conversation), in the engine's 2048-token chunks, ``--rounds`` times each way (which
one goes first alternates); the caches the two leave are checked to agree. Prints the median seconds and
tokens/s of each and one ``ratio kda_prefill_<n> = X`` line per length (the token loop's time over the
chunked one's, median of the rounds, with their range).

Run: `uv run --extra backend python bench/kda_prefill.py [--lengths 512 2048 6000] [--checkpoint tiny|large]
[--quick]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

import mlx.core as mx  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from backend import dist, mlx_internals  # noqa: E402
from backend.tiny import make_tiny  # noqa: E402
from bench.decode_step import CHECKPOINTS  # noqa: E402

STEP = 2048  # the engine's default prefill chunk


def feed(model, cache: list, tokens: mx.array) -> None:
    """Read ``tokens`` into ``cache`` in the engine's chunks, evaluating only the caches of each (as mlx-lm's
    prompt processing, and so the engine's prefill, does)."""
    for i in range(0, tokens.shape[1], STEP):
        model(tokens[:, i : i + STEP], cache=cache)
        mx.eval([c.state for c in cache])


def read(model, context: mx.array, prompt: mx.array) -> tuple[float, list[mx.array]]:
    """Seconds to read ``prompt`` after ``context`` (not timed), and the caches' state after it."""
    cache = make_prompt_cache(model)
    feed(model, cache, context)
    tic = time.perf_counter()
    feed(model, cache, prompt)
    return time.perf_counter() - tic, [x for c in cache for x in c.state if isinstance(x, mx.array)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 6000])
    parser.add_argument("--context", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkpoint", choices=sorted(CHECKPOINTS), default="tiny")
    parser.add_argument("--quick", action="store_true", help="short prompts, two rounds (what tests/bench runs)")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.context, args.rounds = [100], 50, 2
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        path = make_tiny(Path(tmp) / "m", **CHECKPOINTS[args.checkpoint])
        model = dist.load_model(str(path), None, trust_remote_code=True)[0]
        vocab = model.args.text_config.vocab_size
        tokens = mx.random.randint(8, vocab, (1, args.context + max(args.lengths)), key=mx.random.key(0))
        context = tokens[:, : args.context]
        read(model, context, tokens[:, args.context : args.context + 16])  # warm-up: the JIT compiles here
        print(f"machine: {os.cpu_count()} CPU cores, mlx on CPU; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"checkpoint {args.checkpoint}, {args.context} tokens of context, chunks of {STEP}, {args.rounds} rounds")
        print("tokens   token loop s (tok/s)   chunked s (tok/s)")
        ratios = {}
        for n in args.lengths:
            prompt = tokens[:, args.context : args.context + n]
            seconds: dict[bool, list[float]] = {False: [], True: []}
            for r in range(args.rounds):
                states = {}
                for chunked in (r % 2 == 0, r % 2 != 0):
                    mlx_internals.read_kda_in_chunks(chunked)
                    took, states[chunked] = read(model, context, prompt)
                    seconds[chunked].append(took)
                drift = max(mx.abs(a - b).max().item() for a, b in zip(states[True], states[False], strict=True))
                if drift > 1e-3:
                    raise RuntimeError(f"the two readings disagree: their caches differ by {drift}")
            loop, chunk = (statistics.median(seconds[c]) for c in (False, True))
            ratios[n] = sorted(a / b for a, b in zip(seconds[False], seconds[True], strict=True))
            print(f"{n:6d}   {loop:7.3f} ({n / loop:6.0f})       {chunk:7.3f} ({n / chunk:6.0f})")
        for n, rs in ratios.items():
            print(f"ratio kda_prefill_{n} = {statistics.median(rs):.2f} (rounds {rs[0]:.2f}-{rs[-1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
