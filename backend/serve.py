"""`k3-backend serve`: bind the ROUTER, load the model and warm it up, serve until SIGTERM/SIGINT.

The socket is bound before the weights are read (minutes for ~375 GB per Mac): meanwhile ``hello`` and
``status`` are answered with state ``loading`` and how far the load is (backend/loading.py), and requests wait
for the model (at most --load-wait seconds, with ``progress`` messages). Stdout carries the daemon's own lines
only, each starting ``k3-backend ``: ``k3-backend listening on ENDPOINT`` once bound, what the load is doing
(``k3-backend loading the model: ...``, for the demo's phases), and the ready line (``k3-backend ready on
ENDPOINT``) once the model is loaded and its kernels compiled, so whoever starts the daemon (tests, a
supervisor) knows from one line that requests will be served at once, and on which port when it bound tcp
port 0. By default
the socket is ``ipc://`` in a directory only this user may enter (k3lsp/wire/local.py). Before anything is loaded
the endpoint is claimed (backend/endpoint_claim.py): a second serve on it refuses at once, naming the first.

Under `mlx.launch` (hostfiles/README.md) every rank runs this command: each loads its tensor-parallel shard,
rank 0 alone binds the ROUTER and prints the ready line, the others follow rank 0's scheduling steps
(backend/pair.py). When a rank fails, rank 0 ends every open request with ``error`` ``rank_failure`` and
exits with RANK_FAILURE_EXIT, so a supervisor restarts the pair.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from backend import auth, endpoint_claim, exitstatus, store
from backend.agent import EFFORT_BUDGETS, AgentConfig
from backend.daemon import Daemon, DaemonConfig
from backend.engine import EngineArgs
from backend.exitstatus import RANK_FAILURE_EXIT
from backend.launch import LISTENING, READY
from backend.prompts import PROMPT_VERSION
from backend.script import Script, ScriptError, load_script
from backend.settings import add_flags, from_args
from k3lsp.wire import ending, keys, sanitize
from k3lsp.wire.protocol import EFFORTS, ErrorCode

log = logging.getLogger(__name__)

FAILURE_GRACE = 5.0  # seconds rank 0 has to send the rank_failure errors before it exits regardless
STOP_GRACE = 10.0  # under mlx.launch a SIGTERM usually means a peer died: a turn started after it reports it first
STOP_BOUND = 60.0  # a stop of the pair that takes longer is stuck in a collective: exit non-zero


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The settings of the config dataclasses are generated from their fields (backend/settings.py), with the
    fields' defaults; the rest are this command's own."""
    p.add_argument("--model", required=True, help="checkpoint directory or Hugging Face repo")
    add_flags(p, DaemonConfig)
    add_flags(p, EngineArgs)
    add_flags(p, AgentConfig)
    p.add_argument(
        "--effort-tokens",
        action="append",
        default=[],
        metavar="EFFORT=N",
        help="generated tokens per request at one effort (repeatable; defaults "
        + ", ".join(f"{e}={n}" for e, n in EFFORT_BUDGETS.items())
        + ")",
    )
    p.add_argument(
        "--trace-file",
        type=Path,
        help="append every finished conversation to this JSON-lines file (fidelity record --traces)",
    )
    p.add_argument("--script", help="JSON file of scripted answers forced through the engine (tests, demos)")
    p.add_argument(
        "--store",
        type=Path,
        default=store.default_path(),
        help="sqlite file of complete audits answered again to every authorised client (default: "
        f"${store.ENV_PATH}, else %(default)s; its folder is made 0700, the file 0600)",
    )
    p.add_argument(
        "--store-max-bytes",
        type=int,
        default=store.DEFAULT_MAX_BYTES,
        help="results kept in the store, in bytes; the least recently used go first (default %(default)s)",
    )
    p.add_argument(
        "--no-store",
        dest="store",
        action="store_const",
        const=None,
        help="keep no results: every audit request is generated",
    )
    add_flags(p, auth.Security)
    p.add_argument(
        "--rank-timeout",
        type=float,
        default=300.0,
        help="under mlx.launch: seconds one step may take on all ranks before the pair is failed",
    )
    p.add_argument(
        "--rank-tick",
        type=float,
        default=5.0,
        help="under mlx.launch: seconds between rank 0's liveness steps while idle",
    )
    p.add_argument(
        "--load-pace",
        type=float,
        default=0.0,
        help="pause this long after each layer read while loading: only to watch the loading state of a "
        "tiny checkpoint (demos, tests); 0 in real use",
    )


def run(args: argparse.Namespace) -> int:
    """Serve; the exit code is also recorded for a supervisor (backend/exitstatus.py)."""
    code = _run(args)
    exitstatus.record(code)
    return code


def _run(args: argparse.Namespace) -> int:
    sanitize.log_to_stderr("%(asctime)s %(levelname)s %(name)s: %(message)s")  # logs quote the model
    problem = _check(args)
    if problem:
        print(f"k3-backend serve: {problem}", file=sys.stderr)
        return 2
    try:
        script = load_script(args.script) if args.script else None
    except ScriptError as exc:
        print(f"k3-backend serve: {exc}", file=sys.stderr)
        return 2
    if not _checkpoint_or_repo(args.model):  # exit 1, as every model that cannot be loaded (a supervisor gives up)
        print(
            f"k3-backend serve: cannot load model {args.model}: no such directory; give a checkpoint directory or "
            "a Hugging Face repo id (owner/name)",
            file=sys.stderr,
        )
        return 1
    try:  # rank 0 alone binds; the claim is held (referenced) until serving ends
        claim = endpoint_claim.claim(args.bind) if os.environ.get("MLX_RANK", "0") == "0" else None
    except endpoint_claim.EndpointTaken as exc:
        print(f"k3-backend serve: {exc}", file=sys.stderr)
        return 2
    with claim or contextlib.nullcontext():
        return asyncio.run(_serve(args, script, _reserve_stdio()))


def _reserve_stdio() -> TextIO:
    """Keep stdout for the ready line alone and let nothing read stdin; returns the ready line's stream.

    Libraries the load runs (transformers, a checkpoint's own code) may print, and transformers may even ask
    an interactive question on stdout and read the answer from stdin. From here on file descriptor 1 (and
    ``sys.stdout``) is stderr and descriptor 0 is /dev/null, while the ready line goes to the original stdout.
    """
    sys.stdout.flush()
    # Once nobody reads these lines (the launcher is gone), serve ends at the next one, quietly, with 141, as every
    # command does at a closed stdout (docs/cli.md); the ready line is its last, so nothing was served yet.
    ready = io.TextIOWrapper(ending.ProtocolStdout(os.dup(1)), line_buffering=True)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return ready


def _check(args: argparse.Namespace) -> str | None:
    if not args.bind.startswith(("tcp://", "ipc://")):
        return f"--bind must be a tcp:// or ipc:// endpoint, got {args.bind!r}"
    names = (
        "prefill_step_size",
        "max_tokens",
        "max_concurrency",
        "max_open_per_client",
        "prompt_cache_size",
        "store_max_bytes",
    )
    for name in names:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if args.max_prompt_tokens < 0 or args.prompt_cache_bytes < 0:
        return "--max-prompt-tokens and --prompt-cache-bytes must be >= 0 (0: the default)"
    try:
        effort_budgets(args.effort_tokens)
    except ValueError as exc:
        return str(exc)
    if args.max_tool_rounds < 0 or args.tool_timeout <= 0 or args.deadline <= 0:
        return "--max-tool-rounds must be >= 0, --tool-timeout and --deadline > 0"
    if args.temp < 0 or not 0 <= args.top_p <= 1:
        return "need --temp >= 0 and 0 <= --top-p <= 1"
    if args.rank_timeout <= 0 or args.rank_tick <= 0 or args.load_wait <= 0 or args.load_pace < 0:
        return "--rank-timeout, --rank-tick and --load-wait must be > 0, --load-pace >= 0"
    try:  # before the model load, which takes minutes on the real model
        auth.check(args.bind, from_args(auth.Security, args))
    except (auth.InsecureBindError, keys.KeyFileError) as exc:
        return str(exc)
    return None


def _checkpoint_or_repo(model: str) -> bool:
    """Whether ``model`` is a directory here or could name a Hugging Face repo: a missing path would otherwise be
    refused with the Hub's repo-id rules, after the socket was bound."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if Path(model).expanduser().exists():
        return True
    try:
        validate_repo_id(model)
    except HFValidationError:
        return False
    return True


def effort_budgets(items: list[str]) -> dict[str, int]:
    """The token budget per effort: the defaults, with each ``EFFORT=N`` of --effort-tokens applied."""
    budgets = dict(EFFORT_BUDGETS)
    for item in items:
        effort, _, n = item.partition("=")
        if effort not in EFFORTS or not n.isdigit() or int(n) < 1:
            raise ValueError(
                f"--effort-tokens wants EFFORT=N with EFFORT in {', '.join(EFFORTS)} and N >= 1, got {item!r}"
            )
        budgets[effort] = int(n)
    return budgets


def _agent_config(args: argparse.Namespace) -> AgentConfig:
    return from_args(AgentConfig, args, budgets=effort_budgets(args.effort_tokens))


async def _serve(args: argparse.Namespace, script: Script | None, ready: TextIO) -> int:
    import mlx.core as mx

    from backend import dist

    rank = os.environ.get("MLX_RANK")
    # Under mlx.launch, init waits for every rank: one that never starts would block it forever.
    bounded = (
        contextlib.nullcontext()
        if rank is None
        else dist.deadline(
            args.rank_timeout,
            f"k3-backend serve: rank {rank}: the ranks did not all connect within "
            f"{args.rank_timeout:g} s (run k3-backend doctor under the same launch command)",
        )
    )
    with bounded:
        group = mx.distributed.init()
    ranks = group if group.size() > 1 else None
    if ranks is not None:
        _log_rank(group.rank(), group.size())
    agent = _agent_config(args)
    engine_args = from_args(
        EngineArgs, args, model=args.model, max_tokens=agent.budget("max"), temp=agent.temp, top_p=agent.top_p
    )
    try:
        if ranks is None or group.rank() == 0:
            return await _lead(engine_args, ranks, args, script, ready)
        try:  # a follower loads on this thread: it has no socket to answer meanwhile
            engine = _load(engine_args, ranks, args, hooks=script)
        except LoadError as exc:
            print(f"k3-backend serve: {exc}", file=sys.stderr)
            return 1
        return _follow(engine, group, args)
    finally:
        mx_clear_streams()


class LoadError(RuntimeError):
    """The model could not be loaded (the message says which and why)."""


async def _stop_after_a_turn(daemon: Daemon, fail: Callable[[str], None]) -> None:
    """Stop once the pair has taken a whole turn after the signal: its exchange fails if a peer died, and then
    the requests end with ``rank_failure``, not ``shutdown``. A turn that is still under way after STOP_GRACE is
    stuck in a collective with a peer that will not answer (a killed peer does not always make it fail): that
    too is a rank failure. With no turn under way and none completed by then, a plain stop."""
    scheduler = daemon.scheduler
    under_way = scheduler.busy_since is not None  # read first: the engine thread counts a turn, then clears it
    after = scheduler.turns + (2 if under_way else 1)  # a turn under way may have exchanged before the peer died
    scheduler.turn_now()
    deadline = time.monotonic() + STOP_GRACE
    while scheduler.turns < after and daemon.failure is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if daemon.failure is None and scheduler.turns < after and scheduler.busy_since is not None:
        fail(f"a step did not complete on all ranks within {STOP_GRACE:g} s of the stop signal")
        return
    daemon.stop()


def _load(engine_args, group, args: argparse.Namespace, progress=None, hooks: Script | None = None):
    """Load the model (this rank's shard) and compile its kernels; LoadError if that fails. ``hooks``: the
    ``--script``, given to every rank's engine alike."""
    from backend import dist
    from backend.engine import Engine

    try:
        model, tokenizer = dist.load_model(
            args.model, group, trust_remote_code=args.trust_remote_code, progress=progress, pace=args.load_pace
        )
        engine = Engine(engine_args, model, tokenizer, group=group, hooks=hooks)
        if progress is not None:
            progress.enter("warm-up")
        engine.warmup()
        return engine
    except Exception as exc:
        log.debug("cannot load %s", args.model, exc_info=True)
        raise LoadError(f"cannot load model {args.model}: {exc}") from exc


async def _lead(engine_args, group, args: argparse.Namespace, script: Script | None, ready: TextIO) -> int:
    """Rank 0 (or the only process): the ROUTER at once, the model loaded in a thread, then the scheduler."""
    from backend import dist, loading, pair
    from backend.fidelity.traces import TraceFile
    from backend.scheduler import Scheduler

    loop = asyncio.get_running_loop()

    def fail(message: str) -> None:  # from the engine thread or the watchdog
        loop.call_soon_threadsafe(daemon.fail, ErrorCode.RANK_FAILURE, f"a rank of the pair failed: {message}")
        _exit_after(FAILURE_GRACE, f"k3-backend serve: a rank of the pair failed: {message}")

    stopping: list[asyncio.Task] = []  # held: the loop keeps only weak references to tasks

    def terminate() -> None:
        if group is None or daemon.scheduler is None:
            daemon.stop()
            return
        _exit_after(STOP_BOUND, f"k3-backend serve: the pair did not stop within {STOP_BOUND:g} s")
        stopping.append(loop.create_task(_stop_after_a_turn(daemon, fail)))

    try:  # what can be known from the checkpoint's files is checked before binding: a refusal comes at once
        dist.check_trust(args.model, args.trust_remote_code)
        info = loading.ModelInfo.of(args.model, group.size() if group else 1)
    except Exception as exc:
        print(f"k3-backend serve: cannot load model {args.model}: {exc}", file=sys.stderr)
        return 1
    progress = loading.LoadProgress(say=lambda text: print(f"k3-backend {text}", file=ready, flush=True))
    record = TraceFile(args.trace_file) if args.trace_file else None
    try:
        results = (
            None
            if args.store is None
            else store.ResultStore(args.store, args.store_max_bytes, hooks=script, prompt_version=PROMPT_VERSION)
        )
    except Exception as exc:
        print(f"k3-backend serve: cannot open the result store {args.store}: {exc}", file=sys.stderr)
        return 1
    config = from_args(
        DaemonConfig,
        args,
        slots=engine_args.max_concurrency,
        interactive_reserve=engine_args.interactive_reserve,
        security=from_args(auth.Security, args),
    )
    daemon = Daemon(None, config, _agent_config(args), record, results, loading=(info, progress))
    try:
        endpoint = daemon.bind()
    except Exception as exc:
        print(f"k3-backend serve: cannot bind {args.bind}: {exc}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, terminate)
    links: list[pair.Link] = []

    def serve_loaded(engine) -> None:  # on the event loop, once the loading thread is done
        if group is None:
            scheduler = Scheduler(engine)
        else:
            scheduler = Scheduler(engine, links[0].lead, tick=args.rank_tick, on_failure=fail)
        daemon.attach(scheduler)
        scheduler.start()
        if group is not None:
            pair.watch(scheduler, args.rank_timeout, fail)
        print(READY + endpoint, file=ready, flush=True)

    def load() -> None:  # the loading thread
        try:
            engine = _load(engine_args, group, args, progress, hooks=script)
            if group is not None:
                links.append(pair.Link(group, engine, args.rank_tick))
                links[0].connect()
            loop.call_soon_threadsafe(serve_loaded, engine)
        except LoadError as exc:  # the same on every rank, most likely: exit 1, as a follower does
            progress.failed(str(exc))
            loop.call_soon_threadsafe(daemon.fail, ErrorCode.LOAD_FAILED, str(exc))
        except Exception as exc:
            progress.failed(f"cannot reach the other ranks: {exc}")
            loop.call_soon_threadsafe(daemon.fail, ErrorCode.RANK_FAILURE, f"cannot reach the other ranks: {exc}")
        finally:
            mx_clear_streams()

    print(LISTENING + endpoint, file=ready, flush=True)
    loader = threading.Thread(target=load, name="load", daemon=True)
    loader.start()
    await daemon.serve()
    if results is not None:
        results.close()
    if daemon.failure is not None and daemon.failure[0] == ErrorCode.LOAD_FAILED:
        print(f"k3-backend serve: {daemon.failure[1]}", file=sys.stderr)
        return 1
    if daemon.failure is not None:
        _exit_now(f"k3-backend serve: {daemon.failure[1]}; exiting for the supervisor to restart the pair")
    if loader.is_alive():  # stopped while loading: the thread is inside mlx and cannot be interrupted
        _exit_now("k3-backend serve: stopped while loading the model", code=0)
    if links:
        links[0].close()
    log.info("stopped")
    return 0


def mx_clear_streams() -> None:
    """Destroy this thread's mlx streams: every thread that ran mlx must, before the process exits, or mlx
    may abort at interpreter shutdown ("terminate called without an active exception"; ml-explore/mlx#4327)."""
    import mlx.core as mx

    mx.clear_streams()


def _follow(engine, group, args: argparse.Namespace) -> int:
    """A follower rank: run rank 0's steps until it says stop (exit 0) or the pair fails (exit non-zero)."""
    from backend import pair
    from backend.scheduler import Scheduler

    failed: list[str] = []
    link = pair.Link(group, engine, args.rank_tick)
    try:
        link.connect()
        Scheduler(engine, link.follow, leader=False, on_failure=failed.append).follow()
    except Exception as exc:
        failed.append(str(exc))
    if failed:
        _exit_now(f"k3-backend serve: rank {group.rank()}: {failed[0]}")
    link.close()
    log.info("stopped")
    return 0


def _exit_now(message: str, code: int = RANK_FAILURE_EXIT) -> None:
    """End a process whose pair is broken (or a load that cannot be interrupted): a thread may be stuck in a
    collective or a read that never returns, and mlx's teardown must not wait for it."""
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    exitstatus.record(code)
    os._exit(code)


def _exit_after(seconds: float, message: str) -> None:
    """`_exit_now` in `seconds` unless the process has ended by then."""
    timer = threading.Timer(seconds, _exit_now, (message,))
    timer.daemon = True
    timer.start()


def _log_rank(rank: int, size: int) -> None:
    """Prefix every log line with the rank: `mlx.launch` merges the ranks' output (still the escaping formatter)."""
    fmt = sanitize.Formatter(f"%(asctime)s [rank {rank}/{size}] %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(fmt)
