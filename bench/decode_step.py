"""One decode step at batch sizes 1, 8 and 32: mlx-lm's BatchGenerator step against the engine's compiled one
(backend/decode.py), in one process, interleaved, on the same batches.

Two generators, mlx-lm's ``BatchGenerator`` and ``decode.Generator``, get the same requests: prompts of
``--prompt`` tokens (about an audit prompt's length, so attention reads as much), forced answers through the
engine's ``Forcing`` processor and greedy sampling, as bench/backend_vs_mlx_server.py's requests (``--sampled``:
the engine's seeded samplers at temperature 1, top-p 0.95, the default serving path). Once every sequence
decodes, the two take turns, ``--steps`` steps each, ``--rounds`` times (which one goes first alternates), and
every step's tokens are checked to be the same on both. Prints per batch size the median milliseconds per step
(wall time and the process's CPU time, the figure that holds still on a shared machine) and one
``ratio decode_step_<n> = X`` line (mlx-lm's CPU time per step over the compiled one's, median of the rounds,
with their range). A third generator, the compiled step on one CPU stream (``two_streams=False``), takes its
turns beside them: ``ratio two_streams_<n>`` is its wall time per step over the compiled step's (which splits a
long attention over two streams; wall time, because that split spends more CPU to take less of it).

Run: `uv run --all-extras python bench/decode_step.py [--batches 1 8 32] [--checkpoint tiny|large] [--sampled]
[--quick]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from mlx_lm.generate import BatchGenerator  # noqa: E402
from mlx_lm.sample_utils import greedy_sampler  # noqa: E402

from backend import decode, dist  # noqa: E402
from backend.engine import seeded_sampler  # noqa: E402
from backend.tiny import make_tiny  # noqa: E402

CHECKPOINTS = {"tiny": {}, "large": {"layers": 8, "hidden": 128}}  # as bench/backend_vs_mlx_server.py's
EOS = 3


def requests(batch: int, prompt: int, sampled: bool, vocab: int) -> dict:
    """The insert() arguments of ``batch`` requests: distinct prompts, long forced answers."""
    prompts = [[(7 * i + 3 * j) % (vocab - 8) + 8 for j in range(prompt + i)] for i in range(batch)]
    answers = [[(13 * i + 5 * k) % (vocab - 8) + 8 for k in range(100_000)] for i in range(batch)]
    samplers = [seeded_sampler(1.0, 0.95, seed) if sampled else greedy_sampler for seed in range(batch)]
    return {
        "prompts": prompts,
        "max_tokens": [1 << 30] * batch,
        "samplers": samplers,
        "logits_processors": [[decode.Forcing(a, EOS)] for a in answers],
    }


def decoding(
    kind: Callable[..., BatchGenerator], model, batch: int, prompt: int, sampled: bool, vocab: int
) -> BatchGenerator:
    gen = kind(model, max_tokens=1 << 30, stop_tokens=[[EOS]], completion_batch_size=32, prefill_batch_size=8)
    gen.insert(**requests(batch, prompt, sampled, vocab))
    while len(gen._generation_batch) < batch:
        gen.next()
    return gen


def steps(gen: BatchGenerator, n: int) -> tuple[float, float, list[list[int]]]:
    """n steps: wall seconds, CPU seconds (every thread of the process), the tokens of each step."""
    tokens = []
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        tokens.append([r.token for r in gen.next()[1]])
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


def one_stream(model, **options) -> decode.Generator:
    return decode.Generator(model, two_streams=False, **options)


def bench(model, batch: int, args, vocab: int) -> float:
    gens = {
        "mlx-lm": decoding(BatchGenerator, model, batch, args.prompt, args.sampled, vocab),
        "compiled": decoding(decode.Generator, model, batch, args.prompt, args.sampled, vocab),
        "1-stream": decoding(one_stream, model, batch, args.prompt, args.sampled, vocab),
    }
    first = {name: steps(gen, 8)[2] for name, gen in gens.items()}  # warm-up: kernels, the first traces
    if not first["mlx-lm"] == first["compiled"] == first["1-stream"]:
        raise SystemExit(f"batch {batch}: the compiled step's tokens differ from mlx-lm's")
    wall: dict[str, list[float]] = {name: [] for name in gens}
    cpu: dict[str, list[float]] = {name: [] for name in gens}
    for r in range(args.rounds):
        order = list(gens) if r % 2 == 0 else list(reversed(gens))
        seen = {}
        for name in order:
            w, c, seen[name] = steps(gens[name], args.steps)
            wall[name].append(w / args.steps * 1000)
            cpu[name].append(c / args.steps * 1000)
        if not seen["mlx-lm"] == seen["compiled"] == seen["1-stream"]:
            raise SystemExit(f"batch {batch}, round {r}: the compiled step's tokens differ from mlx-lm's")
    ratios = [a / b for a, b in zip(cpu["mlx-lm"], cpu["compiled"], strict=True)]
    streams = [a / b for a, b in zip(wall["1-stream"], wall["compiled"], strict=True)]
    for name in gens:
        print(
            f"  batch {batch:2d} {name:8s} {statistics.median(wall[name]):6.2f} ms/step wall, "
            f"{statistics.median(cpu[name]):6.2f} ms/step CPU (rounds {min(cpu[name]):.2f}-{max(cpu[name]):.2f})"
        )
    length = args.prompt + batch + 8 + args.rounds * args.steps * 2
    print(f"  batch {batch:2d}: tokens identical over {8 + args.rounds * args.steps} steps (context up to {length})")
    ratio = statistics.median(ratios)
    print(
        f"ratio decode_step_{batch} = {ratio:.2f}  (rounds {', '.join(f'{x:.2f}' for x in ratios)}; "
        "mlx-lm's CPU per step over the compiled step's)"
    )
    print(
        f"ratio two_streams_{batch} = {statistics.median(streams):.2f}  "
        f"(rounds {', '.join(f'{x:.2f}' for x in streams)}; the compiled step's wall time per step on one stream "
        "over two: its attention split, backend/decode.py)"
    )
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--checkpoint", choices=list(CHECKPOINTS), default="tiny")
    parser.add_argument("--prompt", type=int, default=1300, help="prompt tokens per request")
    parser.add_argument("--steps", type=int, default=40, help="steps per turn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sampled", action="store_true", help="seeded sampling (temperature 1) instead of greedy")
    parser.add_argument("--quick", action="store_true", help="batches 1 and 4, short prompts, 2 rounds (tests/bench)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.prompt, args.steps, args.rounds = [1, 4], 100, 8, 2
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="k3step-") as tmp:
        path = make_tiny(Path(tmp) / args.checkpoint, **CHECKPOINTS[args.checkpoint])
        model, _ = dist.load_model(str(path), None, trust_remote_code=True)
        vocab = model.args.text_config.vocab_size
        print(f"{args.checkpoint} checkpoint, {'sampled' if args.sampled else 'greedy'}, load {load:.2f}")
        for batch in args.batches:
            bench(model, batch, args, vocab)
    print(f"load {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
