"""k3-backend against mlx_lm.server: the same tiny checkpoint, the same prompts, exactly 32 tokens each.

Both servers run as their own processes on 127.0.0.1 (free ports) and are stopped by PID at the end.
Each prompt is one audit conversation (system prompt + tool schemas, file context, unit) rendered by the
model's chat template: k3-backend receives it as an `audit` message, mlx_lm.server as the same messages
and tools on /v1/chat/completions, so both prefill the same tokens (checked: prompt token counts are
compared). Both decode greedily (temperature 0) and both generate exactly 32 tokens through one logits
processor: mlx_lm.server with a logit bias of -100 on the end-of-message token, k3-backend with a script
(`--script`) that forces a 64-token answer cut by max_tokens 32. Scenarios: 20 sequential requests, and
8 concurrent ones. Prints throughput (generated tokens / wall time) and latency for both, one line
`ratio NAME = X` per scenario (k3-backend / mlx_lm.server, higher is better), and the transport overhead
of the ROUTER: the p50 of a `ping` round trip and of end-to-end latency minus the daemon's own time.

Run: `uv run python bench/backend_vs_mlx_server.py` (about a minute on 2 CPU cores).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
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

TOKENS = 32
SEQUENTIAL, CONCURRENT, WARMUP, REPEATS = 20, 8, 2, 3
EOS = 3  # the tiny tokenizer's <|end_of_msg|>
ANSWER = " ".join(f"n{i} = len[{i}] - {i % 5};" for i in range(40))  # well over 32 tokens, no short period
CACHED: dict[str, list[int]] = {"k3-backend": [], "mlx_lm.server": []}  # prompt tokens served from cache
CONTEXT = "#include <linux/uaccess.h>\nstruct req { size_t len; char data[64]; };"


def unit(i: int) -> dict:
    code = (
        f"int handler_{i}(struct req *r, const char __user *u)\n"
        f"{{\n\treturn copy_from_user(r->data, u, r->len + {i});\n}}"
    )
    return {"path": "drivers/bench.c", "unit": f"handler_{i}", "code": code, "context": CONTEXT}


# --- k3-backend ----------------------------------------------------------------------------------------------


async def k3_one(wire: Wire, rid: str, fields: dict) -> tuple[float, dict]:
    tic = time.perf_counter()
    msgs = await wire.request("audit", rid, **fields, max_tokens=TOKENS)
    latency = time.perf_counter() - tic
    done = msgs[-1]
    if done["kind"] != "done" or done["stats"]["generated_tokens"] != TOKENS:
        raise RuntimeError(f"k3-backend: unexpected end {done}")
    CACHED["k3-backend"].append(done["stats"]["cached_tokens"])
    return latency, done["stats"]


async def k3_warmup(endpoint: str) -> dict:
    """Two warm-up audits, then the transport figures: ping round trips and a sequential request's overhead."""
    async with Wire(endpoint, timeout=120) as wire:
        warm = [await k3_one(wire, f"w{i}", unit(1000 + i)) for i in range(WARMUP)]
        pings = []
        for i in range(300):
            tic = time.perf_counter()
            await wire.ask("ping", f"p{i}")
            pings.append(time.perf_counter() - tic)
        runs = [await k3_one(wire, f"o{i}", unit(2000 + i)) for i in range(10)]
    return {
        "ping": pings,
        "overhead": [lat - stats["seconds"] for lat, stats in runs],
        "prompt_tokens": warm[0][1]["prompt_tokens"],
    }


async def k3_sequential(endpoint: str, rep: int) -> tuple[float, list[float]]:
    async with Wire(endpoint, timeout=120) as wire:
        tic = time.perf_counter()
        runs = [await k3_one(wire, f"s{i}", unit(rep * 100 + i)) for i in range(SEQUENTIAL)]
        return time.perf_counter() - tic, [lat for lat, _ in runs]


async def k3_concurrent(endpoint: str, rep: int) -> tuple[float, list[float]]:
    async with Wire(endpoint, timeout=120) as wire:
        tic = time.perf_counter()
        runs = await asyncio.gather(*(k3_one(wire, f"c{i}", unit(rep * 100 + 50 + i)) for i in range(CONCURRENT)))
        return time.perf_counter() - tic, [lat for lat, _ in runs]


# --- mlx_lm.server -------------------------------------------------------------------------------------------


def start_mlx_server(model: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port_block(1)
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlx_lm.server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--trust-remote-code",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"mlx_lm.server exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise RuntimeError("mlx_lm.server did not start within 120 s")


def chat(url: str, messages: list[dict], tokens: int, timeout: float = 120) -> tuple[float, dict]:
    """One /v1/chat/completions of exactly ``tokens`` tokens (greedy, the end of message banned), with the audit
    tools and the daemon's default thinking effort, so both servers render the same prompt; (latency, answer)."""
    body = {
        "messages": messages,
        "tools": prompts.AUDIT_TOOLS,
        "max_tokens": tokens,
        "temperature": 0.0,
        "logit_bias": {str(EOS): -100.0},
        "chat_template_kwargs": {"thinking_effort": "low"},
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    tic = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.loads(resp.read())
    return time.perf_counter() - tic, answer


def mlx_one(url: str, fields: dict, specials: tuple[str, ...]) -> tuple[float, dict]:
    messages = prompts.audit_messages(
        path=fields["path"], unit=fields["unit"], code=fields["code"], context=fields["context"], specials=specials
    )
    latency, answer = chat(url, messages, TOKENS)
    if answer["usage"]["completion_tokens"] != TOKENS:
        raise RuntimeError(f"mlx_lm.server: unexpected usage {answer['usage']}")
    CACHED["mlx_lm.server"].append(answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))
    return latency, answer["usage"]


def mlx_warmup(url: str, specials: tuple[str, ...]) -> dict:
    runs = [mlx_one(url, unit(1000 + i), specials) for i in range(WARMUP)]
    return {"prompt_tokens": runs[0][1]["prompt_tokens"]}


def mlx_sequential(url: str, rep: int, specials: tuple[str, ...]) -> tuple[float, list[float]]:
    tic = time.perf_counter()
    runs = [mlx_one(url, unit(rep * 100 + i), specials) for i in range(SEQUENTIAL)]
    return time.perf_counter() - tic, [lat for lat, _ in runs]


def mlx_concurrent(url: str, rep: int, specials: tuple[str, ...]) -> tuple[float, list[float]]:
    with ThreadPoolExecutor(CONCURRENT) as pool:
        tic = time.perf_counter()
        runs = list(pool.map(lambda i: mlx_one(url, unit(rep * 100 + 50 + i), specials), range(CONCURRENT)))
        return time.perf_counter() - tic, [lat for lat, _ in runs]


# --- report --------------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def report(name: str, n: int, runs: list[tuple[float, list[float]]]) -> float:
    """Print the median run (by wall time) of a scenario; returns its throughput in tokens/s."""
    wall, latencies = sorted(runs)[len(runs) // 2]
    throughput = n * TOKENS / wall
    print(
        f"  {name:14s} {throughput:7.1f} tok/s  {n / wall:5.2f} req/s  latency p50 {ms(statistics.median(latencies))}"
        f"  max {ms(max(latencies))}  wall {wall:.2f} s  (median of {len(runs)}: "
        + ", ".join(f"{n * TOKENS / w:.0f}" for w, _ in runs)
        + " tok/s)"
    )
    return throughput


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        model = make_tiny(Path(tmp) / "tiny")
        specials = prompts.special_strings(load_tokenizer(str(model), trust_remote_code=True))
        script = [{"unit": "*", "turns": [ANSWER]}]
        with serving(model, script=script, args=["--temp", "0", "--max-tokens", str(TOKENS)]) as daemon:
            proc, url = start_mlx_server(model, Path(tmp) / "mlx_server.log")
            try:
                ours, theirs = asyncio.run(k3_warmup(daemon.endpoint)), mlx_warmup(url, specials)
                runs = {key: [] for key in ("k3 sequential", "mlx sequential", "k3 concurrent", "mlx concurrent")}
                for rep in range(REPEATS):  # interleaved, so load from other processes hits both alike
                    runs["k3 sequential"].append(asyncio.run(k3_sequential(daemon.endpoint, rep)))
                    runs["mlx sequential"].append(mlx_sequential(url, rep, specials))
                    runs["k3 concurrent"].append(asyncio.run(k3_concurrent(daemon.endpoint, rep)))
                    runs["mlx concurrent"].append(mlx_concurrent(url, rep, specials))
            finally:
                stop(proc)
    print(f"machine: {os.cpu_count()} CPU cores, mlx on CPU; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"prompt tokens per request: k3-backend {ours['prompt_tokens']}, mlx_lm.server {theirs['prompt_tokens']}"
        f"; {TOKENS} generated tokens each; both servers up, scenarios interleaved, {REPEATS} repeats"
    )
    print(
        "prompt tokens served from the prompt cache, median per request: "
        + ", ".join(f"{name} {statistics.median(c):.0f}" for name, c in CACHED.items())
    )
    ratios = {}
    for scenario, n in (("sequential", SEQUENTIAL), ("concurrent", CONCURRENT)):
        print(f"{scenario} x{n}:")
        a = report("k3-backend", n, runs[f"k3 {scenario}"])
        b = report("mlx_lm.server", n, runs[f"mlx {scenario}"])
        ratios[scenario] = a / b
    for scenario, ratio in ratios.items():
        print(f"ratio {scenario} = {ratio:.2f}")
    print(
        f"transport: ping round trip p50 {ms(statistics.median(ours['ping']))} "
        f"(p90 {ms(statistics.quantiles(ours['ping'], n=10)[-1])}); "
        f"end-to-end minus daemon time p50 {ms(statistics.median(ours['overhead']))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
