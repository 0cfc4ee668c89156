"""k3-backend against mlx_lm.server: generated tokens per second at batch sizes 1 to 32, both servers measured the
same way in one interleaved run, on the tiny checkpoint and on a larger random kimi_k3 (8 layers of 128).

Both servers run as their own processes on 127.0.0.1 (free ports), stay up for the whole run and are stopped by
PID at the end. Every request is one audit conversation (system prompt + tool schemas, file context, a unit of
its own) rendered by the checkpoint's renderer: an `audit` message for k3-backend, the same messages and tools
on /v1/chat/completions for mlx_lm.server (not streamed: its cheapest way), so both prefill the same tokens
(checked). Both decode greedily and generate exactly the tokens asked for, each through one logits processor per
request: mlx_lm.server a logit bias of -100 on the end-of-message token with `max_tokens`, k3-backend a script
(`--script`, forced tokens through the real engine) longer than any generation, cut by the request's
`max_tokens`. Every reply is checked to have generated exactly that many tokens.

Scenarios: `sequential` (one short request after another: the per-request path, as on every save) and
`concurrent_<n>` for each batch size n (n clients, each sending its next request when its last one ended, so
n stay in the batch). In each repeat of a scenario the clients of the server that goes first send requests for
`--seconds`, then the other server gets exactly as many (the same work, so its wall time is about `--seconds`
divided by the ratio); the two servers take turns, scenario by scenario, and which one goes first alternates,
`--repeats` times, so load from other processes on the machine hits both alike. Throughput is generated tokens /
wall time, from the first byte of the first request to the last token of the last reply. Prints tokens/s per
scenario for both (median and spread over the repeats), one `ratio SCENARIO[CHECKPOINT] = X` line each (the
median of the repeats' k3-backend / mlx_lm.server ratios, higher is better, with their spread), the load before
and after, and a PNG of the curve (`--png`; needs matplotlib, the `bench` extra). `--quick`: tiny inputs, one
repeat, the tiny checkpoint only (the test that keeps this script working runs it).

Run: `uv run --all-extras python bench/backend_vs_mlx_server.py` (about 20 minutes on 2 CPU cores; targets: every
ratio >= 1.5 and sequential >= 1.3 on the tiny checkpoint, >= 1.0 on the larger one).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support (run as a script from anywhere)
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from backend import prompts  # noqa: E402
from backend.dist import load_tokenizer  # noqa: E402
from backend.tiny import make_tiny  # noqa: E402
from tests.support.daemon import Wire, serving, stop  # noqa: E402
from tests.support.pair import free_port_block  # noqa: E402

# make_tiny arguments. The larger one is 8 layers of 128: a decode step of 32 takes ~6x the tiny one's (88 vs
# 14 ms), the model's own work. Wider was too slow to measure every batch size 3 times on the shared 2 cores: a
# step of 32 took 390 ms with 256 and 1.1-1.8 s with 512 (a 256-token round of 32 requests: 5-8 minutes).
CHECKPOINTS = {"tiny": {}, "large": {"layers": 8, "hidden": 128}}
TARGETS = {"tiny": (1.5, 1.3), "large": (1.0, 1.0)}  # (every concurrent_<n>, sequential)
BATCHES = (1, 4, 8, 16, 32)
EOS = 3  # the tiny tokenizer's <|end_of_msg|>
ANSWER = " ".join(f"n{i} = len[{i}] - {i % 5};" for i in range(60))  # 867 tokens, no short period
RESETS = 5  # tries of a request whose connection mlx_lm.server dropped before reading it (counted, printed)
# mlx_lm.server as `python -m mlx_lm.server`, with a listen queue of 128 instead of socketserver's 5: each request
# is an HTTP/1.0 connection of its own, and with 16-32 clients reconnecting in the same step the queue of 5
# overflowed, the kernel dropped connections and their clients waited ~1 s before a reset (50 in one run): a cost
# of the set-up, not of the server's work, and counted against it.
MLX_SERVER = (
    "import sys, http.server, mlx_lm.server; http.server.ThreadingHTTPServer.request_queue_size = 128; "
    "sys.argv[0] = 'mlx_lm.server'; mlx_lm.server.main()"
)
CONTEXT = "#include <linux/uaccess.h>\nstruct req { size_t len; char data[64]; };"
PNG = REPO / ".cache" / "bench" / "backend_vs_mlx_server.png"
SIDES = ("k3-backend", "mlx_lm.server")


@dataclass(frozen=True)
class Scenario:
    name: str
    batch: int  # requests in flight
    tokens: int  # generated per request


@dataclass
class Plan:
    checkpoints: list[str]
    scenarios: list[Scenario]
    seconds: float  # each scenario lasts at least this long on each side
    repeats: int
    png: Path | None


@dataclass
class Run:
    wall: float
    tokens: int
    latencies: list[float]
    counts: list[int]  # requests each client sent

    @property
    def rate(self) -> float:
        return self.tokens / self.wall


@dataclass
class Quota:
    """How long each client goes on: ``counts[i]`` requests for client i, or (counts None) new requests until
    ``seconds`` have passed (at least one each)."""

    batch: int
    counts: list[int] | None = None
    seconds: float = 0.0

    def clients(self) -> list[int]:
        return list(range(self.batch))

    def more(self, client: int, sent: int, start: float) -> bool:
        if self.counts is not None:
            return sent < self.counts[client]
        return sent == 0 or time.perf_counter() - start < self.seconds


@dataclass
class Served:
    """What one side reported about its requests: prompt tokens, and how many of them its prompt cache held."""

    prompt: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)


def unit(i: int) -> dict:
    """A unit of its own for every request: only the system prompt and the file context are shared. Numbers of
    one width, so that every prompt has as many tokens."""
    code = (
        f"int handler_{i:06d}(struct req *r, const char __user *u)\n"
        f"{{\n\treturn copy_from_user(r->data, u, r->len + {i:06d});\n}}"
    )
    return {"path": "drivers/bench.c", "unit": f"handler_{i:06d}", "code": code, "context": CONTEXT}


# --- k3-backend ----------------------------------------------------------------------------------------------


class K3Backend:
    name = SIDES[0]

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.served = Served()

    def measure(self, quota: Quota, tokens: int, units: Units) -> Run:
        return asyncio.run(self._measure(quota, tokens, units))

    async def _measure(self, quota: Quota, tokens: int, units: Units) -> Run:
        async with Wire(self.endpoint, timeout=600) as wire:
            latencies: list[float] = []

            async def client(c: int) -> int:
                sent = 0
                while quota.more(c, sent, start):
                    i, sent = units.next(), sent + 1
                    tic = time.perf_counter()
                    done = (await wire.request("audit", f"u{i}", **unit(i), max_tokens=tokens))[-1]
                    latencies.append(time.perf_counter() - tic)
                    stats = done.get("stats", {})
                    if done["kind"] != "done" or stats.get("generated_tokens") != tokens:
                        raise RuntimeError(f"k3-backend: unexpected end {done}")
                    self.served.prompt.append(stats["prompt_tokens"])
                    self.served.cached.append(stats["cached_tokens"])
                return sent

            start = time.perf_counter()
            counts = await asyncio.gather(*(client(c) for c in quota.clients()))
            return Run(time.perf_counter() - start, tokens * sum(counts), latencies, list(counts))

    def transport(self) -> str:
        """The ROUTER's own cost: a ping's round trip."""
        return asyncio.run(self._transport())

    async def _transport(self) -> str:
        async with Wire(self.endpoint, timeout=60) as wire:
            pings = []
            for i in range(200):
                tic = time.perf_counter()
                await wire.ask("ping", f"p{i}")
                pings.append(time.perf_counter() - tic)
        return f"k3-backend ping round trip p50 {statistics.median(pings) * 1000:.2f} ms"


# --- mlx_lm.server -------------------------------------------------------------------------------------------


def chat(
    url: str, messages: list[dict], tokens: int, timeout: float = 600, on_reset: Callable[[], None] = lambda: None
) -> tuple[float, dict]:
    """One /v1/chat/completions of exactly ``tokens`` tokens (greedy, the end of message banned), with the audit
    tools and the daemon's default thinking effort, so both servers render the same prompt; (latency, answer).

    ThreadingHTTPServer listens with a queue of 5: when many clients reconnect at once (each request is its own
    HTTP/1.0 connection), it drops some before reading them; those are sent again (``on_reset`` counts them)."""
    body = {
        "messages": messages,
        "tools": prompts.AUDIT_TOOLS,
        "max_tokens": tokens,
        "temperature": 0.0,
        "logit_bias": {str(EOS): -100.0},
        "chat_template_kwargs": {"thinking_effort": "low"},  # the daemon's default effort: the same prompt
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    tic = time.perf_counter()
    for attempt in range(RESETS):
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                answer = json.loads(resp.read())
            break
        except (ConnectionResetError, http.client.RemoteDisconnected):
            on_reset()
            if attempt == RESETS - 1:
                raise
    return time.perf_counter() - tic, answer


class MlxServer:
    name = SIDES[1]

    def __init__(self, url: str, specials: tuple[str, ...]):
        self.url = url
        self.specials = specials
        self.served = Served()
        self.resets = 0  # connections dropped before the request was read, sent again

    def one(self, i: int, tokens: int) -> float:
        fields = unit(i)
        messages = prompts.audit_messages(
            path=fields["path"],
            unit=fields["unit"],
            code=fields["code"],
            context=fields["context"],
            specials=self.specials,
        )
        latency, answer = chat(self.url, messages, tokens, on_reset=self._reset)
        usage = answer["usage"]
        if usage["completion_tokens"] != tokens:
            raise RuntimeError(f"mlx_lm.server: unexpected usage {usage}")
        self.served.prompt.append(usage["prompt_tokens"])
        self.served.cached.append(usage.get("prompt_tokens_details", {}).get("cached_tokens", 0))
        return latency

    def _reset(self) -> None:
        self.resets += 1

    def measure(self, quota: Quota, tokens: int, units: Units) -> Run:
        latencies: list[float] = []

        def client(c: int) -> int:
            sent = 0
            while quota.more(c, sent, start):
                latencies.append(self.one(units.next(), tokens))
                sent += 1
            return sent

        with ThreadPoolExecutor(quota.batch) as pool:
            start = time.perf_counter()
            counts = list(pool.map(client, quota.clients()))
            return Run(time.perf_counter() - start, tokens * sum(counts), latencies, counts)


def start_mlx_server(model: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port_block(1)
    args = ["--model", str(model), "--host", "127.0.0.1", "--port", str(port), "--trust-remote-code"]
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", MLX_SERVER, *args], stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlx_lm.server exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise RuntimeError("mlx_lm.server did not start within 180 s")


# --- the run -------------------------------------------------------------------------------------------------


class Units:
    """Request numbers never used before in this run: every request reads its own unit."""

    def __init__(self):
        self._count = itertools.count(1)

    def next(self) -> int:
        return next(self._count)


def script() -> list[dict]:
    """Every generation forced to ANSWER (then cut by its max_tokens)."""
    return [{"unit": "*", "turns": [ANSWER]}]


def daemon_flags(tokens: int) -> list[str]:
    """Greedy like mlx_lm.server's requests, and room for the largest batch from one client."""
    flags = ["--temp", "0", "--max-tokens", str(tokens), "--max-concurrency", str(max(BATCHES))]
    return [*flags, "--max-open-per-client", str(2 * max(BATCHES))]


def bench_checkpoint(model: Path, plan: Plan) -> dict[str, dict[str, list[Run]]]:
    """Every scenario on both servers, interleaved; returns scenario -> side -> runs (one per repeat)."""
    specials = prompts.special_strings(load_tokenizer(str(model), trust_remote_code=True))
    longest = max(s.tokens for s in plan.scenarios)
    units = Units()
    with (
        tempfile.TemporaryDirectory(prefix="k3bench-") as tmp,
        serving(model, script=script(), args=daemon_flags(longest)) as daemon,
    ):
        proc, url = start_mlx_server(model, Path(tmp) / "mlx_server.log")
        try:
            sides = [K3Backend(daemon.endpoint), MlxServer(url, specials)]
            for side in sides:  # warm-up: kernels compiled, the shared system prompt and context cached
                side.measure(Quota(2, [1, 1]), 8, units)
            runs: dict[str, dict[str, list[Run]]] = {s.name: {side.name: [] for side in sides} for s in plan.scenarios}
            for number, scenario in enumerate(plan.scenarios):
                for side in sides:  # this batch size's shapes compiled
                    side.measure(Quota(scenario.batch, [1] * scenario.batch), 4, units)
                for rep in range(plan.repeats):
                    first, second = sides if (rep + number) % 2 == 0 else sides[::-1]  # who goes first alternates
                    lead = first.measure(Quota(scenario.batch, seconds=plan.seconds), scenario.tokens, units)
                    runs[scenario.name][first.name].append(lead)
                    runs[scenario.name][second.name].append(
                        second.measure(Quota(scenario.batch, lead.counts), scenario.tokens, units)  # the same work
                    )
                print(f"  {line(scenario, runs[scenario.name])}", flush=True)
            print(f"  {sides[0].transport()}; mlx_lm.server connections reset and sent again: {sides[1].resets}")
        finally:
            stop(proc)
    for side in sides:
        print(
            f"  {side.name}: {statistics.median(side.served.prompt):.0f} prompt tokens per request, "
            f"{statistics.median(side.served.cached):.0f} of them from its prompt cache (medians)"
        )
    if len({statistics.median(side.served.prompt) for side in sides}) != 1:
        raise RuntimeError("the two servers did not read the same prompts")
    return runs


def spread(values: list[float], digits: int = 2) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ratios(by_side: dict[str, list[Run]]) -> list[float]:
    """k3-backend / mlx_lm.server throughput of each repeat (the two ran back to back)."""
    return [a.rate / b.rate for a, b in zip(by_side[SIDES[0]], by_side[SIDES[1]], strict=True)]


def line(scenario: Scenario, by_side: dict[str, list[Run]]) -> str:
    ours, theirs = by_side[SIDES[0]], by_side[SIDES[1]]
    walls = [r.wall for r in ours + theirs]
    lat = {name: statistics.median([x for r in by_side[name] for x in r.latencies]) for name in SIDES}
    requests = sorted(sum(r.counts) for r in ours)
    return (
        f"{scenario.name:13s} {scenario.batch:2d} clients, {requests[0]}-{requests[-1]} requests x "
        f"{scenario.tokens} tokens: "
        f"k3-backend {spread([r.rate for r in ours], 1)} tok/s, mlx_lm.server {spread([r.rate for r in theirs], 1)} "
        f"tok/s, ratio {spread(ratios(by_side))}; latency p50 {lat[SIDES[0]]:.2f} / {lat[SIDES[1]]:.2f} s; "
        f"wall {min(walls):.1f}-{max(walls):.1f} s per side"
    )


def draw(results: dict[str, dict[str, dict[str, list[Run]]]], plan: Plan) -> None:
    """The tokens/s curve over the batch sizes, one panel per checkpoint."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no PNG: matplotlib is not installed (uv sync --extra bench)")
        return
    batches = [s for s in plan.scenarios if s.name.startswith("concurrent_")]
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (name, runs) in zip(axes[0], results.items(), strict=True):
        for side, style in zip(SIDES, ("o-", "s--"), strict=True):
            rates = [[r.rate for r in runs[s.name][side]] for s in batches]
            x = [s.batch for s in batches]
            ax.errorbar(
                x,
                [statistics.median(v) for v in rates],
                yerr=[
                    [statistics.median(v) - min(v) for v in rates],
                    [max(v) - statistics.median(v) for v in rates],
                ],
                fmt=style,
                capsize=3,
                label=side,
            )
        ax.set(title=f"{name} checkpoint", xlabel="requests in flight", ylabel="generated tokens/s", xscale="log")
        ax.set_xticks([s.batch for s in batches], [str(s.batch) for s in batches])
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"k3-backend vs mlx_lm.server, {batches[0].tokens} tokens per request; {time.strftime('%Y-%m-%d')}")
    fig.tight_layout()
    plan.png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plan.png, dpi=120)
    print(f"curve: {plan.png}")


def make_plan(argv: list[str] | None) -> Plan:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny inputs, one repeat, tiny checkpoint (tests)")
    parser.add_argument("--checkpoints", default=",".join(CHECKPOINTS), help="comma-separated: tiny,large")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)), help="batch sizes (default %(default)s)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per concurrent request (%(default)s)")
    parser.add_argument("--sequential-tokens", type=int, default=32, help="tokens per sequential request")
    parser.add_argument("--seconds", type=float, default=10.0, help="least wall time per scenario and side")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--png", type=Path, help=f"where the curve goes (default {PNG}; --quick: none)")
    parser.add_argument("--no-png", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.checkpoints, args.batches, args.tokens, args.sequential_tokens = "tiny", "1,2", 8, 4
        args.seconds, args.repeats = 0.0, 1
    batches = [int(b) for b in args.batches.split(",")]
    if any(not 1 <= b <= max(BATCHES) for b in batches):
        parser.error(f"batch sizes are 1..{max(BATCHES)}")
    checkpoints = args.checkpoints.split(",")
    if not set(checkpoints) <= set(CHECKPOINTS):
        parser.error(f"checkpoints are {', '.join(CHECKPOINTS)}")
    scenarios = [Scenario("sequential", 1, args.sequential_tokens)]
    scenarios += [Scenario(f"concurrent_{b}", b, args.tokens) for b in batches]
    png = None if args.no_png or (args.quick and args.png is None) else args.png or PNG
    return Plan(checkpoints, scenarios, args.seconds, args.repeats, png)


def main(argv: list[str] | None = None) -> int:
    plan = make_plan(argv)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPU cores, mlx on CPU; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="k3bench-models-") as tmp:
        for name in plan.checkpoints:
            shape = {"layers": 4, "hidden": 64} | CHECKPOINTS[name]
            model = make_tiny(Path(tmp) / name, **CHECKPOINTS[name])
            print(
                f"checkpoint {name} ({shape['layers']} layers, hidden {shape['hidden']}): {plan.repeats} repeats, "
                f"at least {plan.seconds:g} s per scenario and side, servers interleaved",
                flush=True,
            )
            results[name] = bench_checkpoint(model, plan)
    load = os.getloadavg()
    print(f"load average after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, runs in results.items():
        concurrent, sequential = TARGETS[name]
        for scenario in plan.scenarios:
            values = ratios(runs[scenario.name])
            target = sequential if scenario.name == "sequential" else concurrent
            print(
                f"ratio {scenario.name}[{name}] = {statistics.median(values):.2f}  "
                f"(repeats {', '.join(f'{v:.2f}' for v in values)}; target >= {target})"
            )
    if plan.png is not None:
        draw(results, plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
