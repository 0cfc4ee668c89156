"""`k3-backend doctor`: find a misconfigured pair in seconds, before a 10-minute load of 375 GB per Mac.

Run it under the same `mlx.launch` command as `serve` (or alone, as one rank). Every rank:

1. connects (bounded: a rank that never starts, or a hostfile naming a dead address, makes `mx.distributed.init`
   wait forever, so a watchdog prints why and ends the process after `--timeout` seconds);
2. says who it is (rank, host, pid, memory), gathered on every rank;
3. times `all_sum` of a scalar (latency) and of 8 and 64 MB (bandwidth) between the ranks;
4. builds the tiny checkpoint in a temp dir and compares its tensor-parallel logits with the unsharded
   logits it computes itself: the sharding code path works on this install and this link;
5. with `--model`, checks the checkpoint is on every rank and its weights / ranks (plus headroom) fit, and
   says how much of the headroom `serve` gives its prompt cache by default (backend/memory.py), and that its
   tokenizer loads (its own code only with `--trust-remote-code`, as `serve` would run it) and speaks the
   Kimi K3 format: think channel and tool-call markers;
6. with `--model`, checks the weights / ranks (plus the same headroom) against macOS's GPU wired-memory cap, and
   that every rank holds the same checkpoint (config, index, tokenizer files, weight file sizes and sampled
   content, compared between the ranks); under jaccl, each rank's macOS version and RDMA devices
   (backend/doctor_checks.py).

Rank 0 prints the tables; every rank exits 1 if any check failed on any rank.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from backend import doctor_checks, memory
from backend.memory import GIB, HEADROOM
from k3lsp.wire import ending

MAX_LOGIT_DIFF = 1e-3  # measured: 3e-6 on the tiny checkpoint, two ring ranks against one process
PROMPT = [1, 5, 9, 42, 77, 100, 3, 8, 250, 17, 64, 2]


@dataclass
class Check:
    name: str
    rank: str  # "all" or the rank it ran on
    result: str
    ok: bool


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="checkpoint directory to check for size and presence on every rank (not loaded)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds for every rank to connect")
    p.add_argument(
        "--check-timeout",
        type=float,
        default=180.0,
        help="seconds for all checks once connected (a cold mlx kernel cache costs ~20 s)",
    )
    p.add_argument("--bandwidth-mb", type=int, nargs="+", default=[8, 64], help="all_sum sizes to time (MB)")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let --model's tokenizer run the Python code it ships (as serve --trust-remote-code)",
    )


def run(args: argparse.Namespace) -> int:
    import mlx.core as mx

    from backend import dist, mlx_internals

    if args.timeout <= 0 or args.check_timeout <= 0 or min(args.bandwidth_mb) < 1:
        print("k3-backend doctor: --timeout, --check-timeout and --bandwidth-mb must be positive", file=sys.stderr)
        return 2
    rank = os.environ.get("MLX_RANK", "0")
    with dist.deadline(
        args.timeout,
        f"k3-backend doctor: rank {rank} ({socket.gethostname()}): the ranks did not "
        f"all connect within {args.timeout:g} s. Is every rank started, and does the hostfile name "
        "the right IPs and free ports?",
    ):
        group = mx.distributed.init()
        hosts = dist.gather(host_info(group.rank()), group)  # the first collective: every rank answered
    with dist.deadline(
        args.check_timeout,
        f"k3-backend doctor: rank {group.rank()}: the checks did not finish "
        f"within {args.check_timeout:g} s: a rank stopped answering or the link is very slow",
    ):
        checks = [Check("ranks answer", "all", f"{len(hosts)} of {group.size()}", len(hosts) == group.size())]
        checks += link_checks(group, args.bandwidth_mb)
        checks += [
            c
            for per_rank in dist.gather(local_checks(group, args.model, args.trust_remote_code), group)
            for c in per_rank
        ]
        versions = doctor_checks.same_mlx(dist.gather(mlx_internals.report(), group))
        checks.append(Check(versions.name, "all", versions.result, versions.ok))
        if args.model is not None:
            same = doctor_checks.same_checkpoint(dist.gather(doctor_checks.checkpoint_report(args.model), group))
            checks.append(Check(same.name, "all", same.result, same.ok))
    ok = all(c.ok for c in checks)
    if group.rank() == 0:
        render(hosts, checks, ok)
    return 0 if ok else 1


def host_info(rank: int) -> dict:
    total, available = memory.memory()
    return {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), "total": total, "available": available}


def link_checks(group, sizes_mb: list[int]) -> list[Check]:
    """all_sum latency (scalar) and bandwidth (each size), as seen from rank 0's clock; the same on all ranks."""
    import mlx.core as mx

    if group.size() == 1:
        return [Check("all_sum", "all", "one rank: no link to measure", True)]

    def timed(x, n: int) -> float:
        mx.eval(mx.distributed.all_sum(x, group=group, stream=mx.cpu))  # warm-up (and wait for every rank)
        tic = time.perf_counter()
        for _ in range(n):
            mx.eval(mx.distributed.all_sum(x, group=group, stream=mx.cpu))
        return (time.perf_counter() - tic) / n

    latency = timed(mx.array(1.0), 200)
    checks = [Check("all_sum latency", "all", f"{latency * 1e6:.0f} us (scalar, mean of 200)", True)]
    for mb in sizes_mb:
        x = mx.zeros(mb * (1 << 20) // 4, dtype=mx.float32)
        seconds = timed(x, 5)
        checks.append(
            Check(f"all_sum {mb} MB", "all", f"{mb / 1024 / seconds:.2f} GB/s ({seconds * 1e3:.1f} ms)", True)
        )
    return checks


def local_checks(group, model: str | None, trust_remote_code: bool = False) -> list[Check]:
    """This rank's checks: sharded vs unsharded logits on the tiny checkpoint, the model's fit and tokenizer."""
    rank = str(group.rank())
    try:
        diff = logits_diff(group)
        result = f"max |diff| {diff:.2e}" if group.size() > 1 else "one rank: the unsharded model runs"
        checks = [Check("sharded logits = unsharded", rank, result, diff <= MAX_LOGIT_DIFF)]
    except Exception as exc:  # the other ranks run the same code with the same sizes: they fail alike
        checks = [Check("sharded logits = unsharded", rank, f"{type(exc).__name__}: {exc}"[:300], False)]
    if model is not None:
        checks.append(fit_check(Path(model), group.size(), rank))
        checks.append(tokenizer_check(Path(model), trust_remote_code, rank))
    verdicts = doctor_checks.rank_verdicts(Path(model) if model else None, group.size())
    return checks + [Check(v.name, rank, v.result, v.ok) for v in verdicts]


def logits_diff(group) -> float:
    """Max |logits| difference between the tiny checkpoint sharded over `group` and loaded whole."""
    import mlx.core as mx

    from backend.dist import load_model
    from backend.tiny import make_tiny

    with tempfile.TemporaryDirectory(prefix="k3-doctor-") as tmp:
        path = str(make_tiny(Path(tmp) / "tiny"))  # its tokenizer code is ours: trusted
        whole, _ = load_model(path, trust_remote_code=True)
        reference = whole(mx.array([PROMPT]))
        mx.eval(reference)
        if group.size() == 1:
            return 0.0
        sharded, _ = load_model(path, group, trust_remote_code=True)
        logits = sharded(mx.array([PROMPT]))
        return float(mx.max(mx.abs(logits - reference)).item())


def fit_check(model: Path, ranks: int, rank: str) -> Check:
    """Whether this rank holds the checkpoint and has memory for its share of the weights plus headroom."""
    files = sorted(model.glob("*.safetensors"))
    if not files:
        return Check("model fits", rank, f"no *.safetensors in {model} on {socket.gethostname()}", False)
    weights = sum(f.stat().st_size for f in files)
    per_rank = weights // ranks
    total, _ = memory.memory()
    cache = memory.prompt_cache_bytes(per_rank, total)
    result = (
        f"{weights / GIB:.1f} GiB / {ranks} ranks + {HEADROOM:.0%} of {memory.usable(total) / GIB:.1f} GiB"
        f" usable; headroom {memory.headroom(per_rank, total) / GIB:.1f} GiB, prompt cache {cache / GIB:.1f} GiB"
    )
    return Check("model fits", rank, result, memory.fits(per_rank, total))


def tokenizer_check(model: Path, trust_remote_code: bool, rank: str) -> Check:
    """Whether this rank loads the checkpoint's tokenizer as serve would, and it has the Kimi K3 channels."""
    from backend.dist import load_tokenizer

    try:
        tok = load_tokenizer(str(model), trust_remote_code=trust_remote_code)
    except Exception as exc:
        return Check("tokenizer", rank, f"{type(exc).__name__}: {exc}"[:300], False)
    if not (tok.has_thinking and tok.has_tool_calling):
        return Check("tokenizer", rank, "no think channel or tool-call markers: not a Kimi K3 tokenizer", False)
    return Check("tokenizer", rank, f"Kimi K3 channels {tok.think_start} {tok.tool_call_start}", True)


def render(hosts: list[dict], checks: list[Check], ok: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    ranks = Table(title="ranks")
    for column in ("rank", "host", "pid", "memory", "available"):
        ranks.add_column(column)
    for h in hosts:
        available = f"{h['available'] / GIB:.1f} GiB" if h["available"] is not None else "n/a"
        ranks.add_row(str(h["rank"]), h["host"], str(h["pid"]), f"{h['total'] / GIB:.1f} GiB", available)
    table = Table(title="checks")
    for column in ("check", "rank", "result", "ok"):
        table.add_column(column)
    for c in checks:
        table.add_row(c.name, c.rank, c.result, "[green]ok[/]" if c.ok else "[red]FAIL[/]")
    console = Console(width=120)
    console.on_broken_pipe = ending.raise_broken_pipe  # rich would exit 1: end as every command does
    console.print(ranks)
    console.print(table)
    console.print("doctor: all checks passed" if ok else "doctor: FAILED (see the checks above)")
