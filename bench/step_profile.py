"""Where an engine step's milliseconds go, from mlx-lm's batch step to the messages on the socket.

Serves the checkpoint with `k3-backend serve` (or `mlx_lm.server`, `--server mlx`, for the peer's own split) as in
bench/backend_vs_mlx_server.py: `--batch` clients, each sending its next audit of `--tokens` forced tokens when
its last one ended, for `--seconds`. Meanwhile py-spy (a sampling profiler, the `bench` extra) records every
Python thread of the server; each sample is charged to the first phase (below) whose frame is on its stack, and
only samples of a thread on the CPU count (a thread waiting in epoll, on a condition or for mlx's own compute
thread takes none). For k3-backend the engine's and scheduler's own timers (`status`: engine `step_seconds`,
`turn_seconds`) are read before and after and printed per step.

Prints, per thread and phase: microseconds of CPU per generated token and the share of the wall time.
docs/engine.md has the figures (the step profile).

Run: `uv run --all-extras python bench/step_profile.py [--batch 8] [--tokens 256] [--seconds 20] [--server mlx]
[--eager-decode]` (`--eager-decode`: k3-backend with mlx-lm's own decode step, the step before backend/decode.py)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the servers of backend_vs_mlx_server.py
import backend_vs_mlx_server as vs

from backend import prompts
from backend.dist import load_tokenizer
from backend.tiny import make_tiny
from tests.support.daemon import Wire, serving, stop

# (phase, frames that mark it): a sample goes to the first phase one of whose frames (a function name, or a
# path fragment) is on its stack. Order matters: mlx-lm's step before what called it.
PHASES = [
    ("mlx-lm BatchGenerator.next (forward pass, sampling)", ("BatchGenerator.next",)),
    ("prefill (our chunks: PromptProcessingBatch)", ("backend/prefill.py",)),
    ("detokenizer", ("Detokenizer.",)),
    ("loop guard", ("LoopDetector.add",)),
    ("prompt cache (lookup, store, drop)", ("backend/prompt_cache.py",)),
    ("per-token bookkeeping (events, finishes)", ("Engine._tokens", "Engine._on_token", "Engine._finish")),
    ("admission and ends", ("Engine._admit", "Engine._apply_ends", "Engine.submit", "Engine._start")),
    ("exchange, reconcile, apply", ("Scheduler._reconcile", "Scheduler._apply", "local_exchange", "Engine.outcome")),
    ("status snapshot", ("Scheduler._publish", "Engine.stats")),
    ("events to the event loop", ("Scheduler._post", "Scheduler._deliver")),
    ("waiting for work", ("Scheduler._take",)),
    ("event loop in epoll (py-spy counts a short wait as running)", ("EpollSelector.select",)),
    ("prompt render (worker threads), script", ("_locked", "backend/prompts.py", "Script.answer")),
    ("channel reading", ("backend/channels.py",)),
    ("finding validation", ("FindingStream.",)),
    ("progress, msgpack, send", ("Daemon._job_send", "Daemon._send", "k3lsp/wire/protocol.py", "send_multipart")),
    ("receive, dispatch", ("Daemon._receive", "Daemon._on_frames", "Daemon._dispatch", "recv_multipart")),
    ("agent loop (other)", ("Agent.",)),
    ("mlx_lm.server: tokenize new requests", ("ResponseGenerator._tokenize",)),
    ("mlx_lm.server: per-token (logprob, detokenize, queue)", ("ResponseGenerator._generate",)),
    ("mlx_lm.server: HTTP handler", ("APIHandler.",)),
]


def phase_of(stack: list[str]) -> str:
    for name, marks in PHASES:
        if any(mark in frame for frame in stack for mark in marks):
            return name
    return "other"


def fold(raw: Path) -> dict[str, collections.Counter]:
    """py-spy's raw output (``thread;frame;...;frame count`` per line) -> thread -> phase -> samples."""
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread = re.sub(r"[-_]\d+", "", frames[0].split(": ", 1)[-1])  # one pool of threads, one name
        out[thread][phase_of(frames[1:])] += int(count)
    return out


def engine_timers(endpoint: str) -> dict:
    async def ask() -> dict:
        async with Wire(endpoint, timeout=60) as wire:
            engine = (await wire.ask("status", "s"))["status"]["engine"]
        # (a daemon before the timers existed has only the steps)
        return {"steps": engine["steps"], **engine.get("step_seconds", {}), **engine.get("turn_seconds", {})}

    return asyncio.run(ask())


def report(samples: dict[str, collections.Counter], rate: int, wall: float, tokens: float) -> None:
    for thread, phases in sorted(samples.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(phases.values())
        print(f"  thread {thread}: on the CPU {total / rate / wall:.0%} of the wall time (threads of a pool summed)")
        for phase, n in phases.most_common():
            seconds = n / rate
            print(f"    {phase:55s} {seconds / tokens * 1e6:8.1f} us/token  {seconds / wall:6.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("k3", "mlx"), default="k3")
    parser.add_argument("--checkpoint", choices=list(vs.CHECKPOINTS), default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw stacks here")
    parser.add_argument("--quick", action="store_true", help="batch 2 x 32 tokens for 3 s (what tests/bench runs)")
    parser.add_argument("--eager-decode", action="store_true", help="k3-backend with mlx-lm's own decode step")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.tokens, args.seconds = 2, 32, 3.0
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    load = os.getloadavg()
    print(f"{args.server} at batch {args.batch} x {args.tokens} tokens on {args.checkpoint}; load {load[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="k3prof-") as tmp, contextlib.ExitStack() as servers:
        model = make_tiny(Path(tmp) / args.checkpoint, **vs.CHECKPOINTS[args.checkpoint])
        if args.server == "k3":
            flags = [*vs.daemon_flags(args.tokens), *(["--eager-decode"] if args.eager_decode else [])]
            daemon = servers.enter_context(serving(model, script=vs.script(), args=flags))
            side, pid = vs.K3Backend(daemon.endpoint), daemon.proc.pid
        else:
            specials = prompts.special_strings(load_tokenizer(str(model), trust_remote_code=True))
            proc, url = vs.start_mlx_server(model, Path(tmp) / "mlx_server.log")
            servers.callback(stop, proc)
            side, pid = vs.MlxServer(url, specials), proc.pid
        units = vs.Units()
        side.measure(vs.Quota(args.batch, [1] * args.batch), args.tokens, units)  # warm-up: kernels, the shared prefix
        before = engine_timers(side.endpoint) if args.server == "k3" else None
        raw = Path(tmp) / "pyspy.txt"
        record = [spy, "record", "--pid", str(pid), "--rate", str(args.rate), "--format", "raw", "--threads"]
        record += ["--nonblocking", "--duration", str(int(args.seconds)), "-o", str(raw)]
        profiler = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run = side.measure(vs.Quota(args.batch, seconds=args.seconds), args.tokens, units)
        profiler.wait(timeout=args.seconds + 120)
        after = engine_timers(side.endpoint) if args.server == "k3" else None
        print(f"{run.tokens} tokens in {run.wall:.1f} s: {run.rate:.1f} tok/s")
        if before is not None:
            steps = after["steps"] - before["steps"]
            print(f"  engine and scheduler timers over {steps} steps ({run.tokens / steps:.1f} tokens a step):")
            for key in after:
                if key != "steps":
                    spent = after[key] - before[key]
                    print(f"    {key:10s} {spent / steps * 1000:8.3f} ms/step  {spent / run.wall:6.1%}")
        # py-spy sampled the first int(seconds) of the run: shares of that, per token at the run's rate
        report(fold(raw), args.rate, int(args.seconds), run.rate * int(args.seconds))
        if args.raw is not None:
            shutil.copyfile(raw, args.raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
