"""A four-generation audit on k3-backend against the same conversation run the way an agent framework runs it on
mlx_lm.server: what append-only continuation saves.

The conversation: the audit turn asks for ``read_lines``, the next for ``find_definition``, the third reports a
finding, and the refutation turn gives its verdict. k3-backend gets one ``audit`` request (with ``refute_from``)
and continues by appending: each round prefills only its new turn. mlx_lm.server is driven as an
OpenAI-compatible framework drives it: every round re-sends the whole message history (the assistant turns
with their tool calls in ``tool_calls``, the tool results as ``tool`` messages, the refutation as a user
message) to /v1/chat/completions and relies on the server's own prompt cache. Same tiny checkpoint, greedy
decoding, and the same number of generated tokens per round on both sides: k3-backend's turns are forced by a
script, mlx_lm.server generates exactly as many tokens (``max_tokens`` of that round, the end of message
banned by a logit bias). Prints the prefilled tokens per round for each (prompt tokens less those served from
the prompt cache), the wall time of the whole conversation, where k3-backend's went (its engine's prefill and
decode seconds, from the daemon's ``status``), and ``ratio tool_loop_speedup = X`` (mlx_lm.server's wall time /
k3-backend's; the median of the runs, interleaved).

Run: ``uv run python bench/tool_loop.py`` (3 runs, a few minutes on 2 CPU cores) or ``--quick`` (1 short run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from backend import prompts  # noqa: E402
from backend.dist import load_tokenizer  # noqa: E402
from backend.tiny import make_tiny  # noqa: E402
from bench.backend_vs_mlx_server import chat, start_mlx_server  # noqa: E402
from tests.support import kimi  # noqa: E402
from tests.support.daemon import Wire, serving, stop  # noqa: E402

PATH, UNIT = "drivers/loop.c", "loop_ioctl"
READ = ("read_lines", {"path": PATH, "start": 1, "end": 80})
DEFINE = ("find_definition", {"symbol": "loop_copy"})
FINDING = kimi.finding(title="Unchecked length reaches memcpy", cwe=787, start_line=3, end_line=3)
VERDICT = ("verdict", {"finding": 1, "verdict": "confirmed", "reason": "nothing bounds len before the copy"})


def sources(size: int) -> tuple[str, str, str, str]:
    """(context, unit code, read_lines answer, find_definition answer): ``size`` scales the file."""
    context = "#include <linux/uaccess.h>\n" + "".join(f"#define LOOP_F{i} (1u << {i % 31})\n" for i in range(size))
    code = "long loop_ioctl(struct file *f, unsigned int cmd, unsigned long arg)\n{\n\treturn loop_copy(f, arg);\n}"
    read = "".join(f"{i}|\tstate->slot[{i}] = table[{i} % n] + off_{i};\n" for i in range(1, 4 * size))
    define = "".join(f"\tif (len_{i} > limit_{i}) return -EINVAL; /* {i} */\n" for i in range(3 * size))
    return context, code, read, define


def script() -> list[dict]:
    turns = [
        kimi.turn(READ, reasoning="Where does arg come from?", content="Reading the file."),
        kimi.turn(DEFINE, reasoning="loop_copy takes the length.", content="Looking at loop_copy."),
        kimi.turn(("report_finding", FINDING), reasoning="len is never bounded.", content="One bug."),
        kimi.turn(VERDICT, reasoning="No check on any path.", content="Confirmed."),
    ]
    return [{"unit": UNIT, "turns": turns}]


async def ours(endpoint: str, context: str, code: str, read: str, define: str) -> tuple[float, list[dict], dict]:
    """The conversation on k3-backend: (wall, per-round stats, the engine's seconds per step phase spent on it)."""
    fields = {"path": PATH, "unit": UNIT, "code": code, "context": context, "refute_from": "medium"}
    async with Wire(endpoint, timeout=300) as wire:
        before = await phases(wire)
        tic = time.perf_counter()
        msgs = await wire.request(
            "audit", f"t{time.monotonic_ns()}", tools={"read_lines": (True, read), "find_definition": (True, define)},
            **fields,
        )  # fmt: skip
        wall = time.perf_counter() - tic
        after = await phases(wire)
    stats = msgs[-1]["stats"]
    if msgs[-1]["kind"] != "done" or stats["rounds"] != 4 or stats["confirmed"] != 1:
        raise RuntimeError(f"k3-backend: unexpected end {msgs[-1]}")
    return wall, stats["turns"], {k: after[k] - before.get(k, 0.0) for k in after}


async def phases(wire: Wire) -> dict[str, float]:
    """The engine's seconds per step phase so far (``status``: engine.step_seconds; none before its first step)."""
    reply = await wire.ask("status", f"s{time.monotonic_ns()}")
    return reply["status"]["engine"].get("step_seconds", {})


def _assistant(name: str, arguments: dict, index: int, content: str, reasoning: str) -> dict:
    """An assistant turn as an OpenAI-compatible framework keeps it: tool_calls with JSON-string arguments."""
    call = {"id": str(index), "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": [call]}


def theirs(url: str, specials, context: str, code: str, read: str, define: str, counts: list[int]) -> tuple:
    """The same conversation on mlx_lm.server, the whole history re-sent each round; (wall, per-round usage)."""
    messages = prompts.audit_messages(path=PATH, unit=UNIT, code=code, context=context, specials=specials)
    followups = [
        [_assistant(*READ, 1, "Reading the file.", "Where does arg come from?"),
         {"role": "tool", "tool_call_id": "1", "name": READ[0], "content": prompts.defuse(read, specials)}],
        [_assistant(*DEFINE, 1, "Looking at loop_copy.", "loop_copy takes the length."),
         {"role": "tool", "tool_call_id": "1", "name": DEFINE[0], "content": prompts.defuse(define, specials)}],
        [_assistant("report_finding", FINDING, 1, "One bug.", "len is never bounded."),
         prompts.refutation_message([(1, FINDING)], specials)],
    ]  # fmt: skip
    usages, wall = [], 0.0
    for n, count in enumerate(counts):
        latency, answer = chat(url, messages, count, timeout=600)
        wall += latency
        usage = answer["usage"]
        if usage["completion_tokens"] != count:
            raise RuntimeError(f"mlx_lm.server: round {n + 1} generated {usage['completion_tokens']}, not {count}")
        usages.append(usage)
        if n < len(followups):
            messages = [*messages, *followups[n]]
    return wall, usages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short run (what tests/bench runs)")
    args = parser.parse_args()
    size, runs = (8, 1) if args.quick else (40, 3)
    context, code, read, define = sources(size)
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        model = make_tiny(Path(tmp) / "tiny")
        specials = prompts.special_strings(load_tokenizer(str(model), trust_remote_code=True))
        with serving(model, script=script(), args=["--temp", "0", "--max-tokens", "8000"]) as daemon:
            proc, url = start_mlx_server(model, Path(tmp) / "mlx_server.log")
            try:
                results = []
                for _ in range(runs):  # interleaved, so load from other processes hits both alike
                    wall, turns, spent = asyncio.run(ours(daemon.endpoint, context, code, read, define))
                    counts = [t["generated_tokens"] for t in turns]
                    peer_wall, usages = theirs(url, specials, context, code, read, define, counts)
                    results.append((wall, turns, peer_wall, usages, spent))
            finally:
                stop(proc)
    print(f"machine: {os.cpu_count()} CPU cores, mlx on CPU; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    wall, turns, peer_wall, usages, spent = sorted(results, key=lambda r: r[2] / r[0])[len(results) // 2]
    print("round  generated  k3-backend prefilled (prompt - cached)  mlx_lm.server prefilled (prompt - cached)")
    for n, (turn, usage) in enumerate(zip(turns, usages, strict=True), 1):
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        print(
            f"{n:5d}  {turn['generated_tokens']:9d}  {turn['prompt_tokens'] - turn['cached_tokens']:8d} "
            f"({turn['prompt_tokens']} - {turn['cached_tokens']})"
            f"{'':14s}{usage['prompt_tokens'] - cached:8d} ({usage['prompt_tokens']} - {cached})"
        )
    ours_total = sum(t["prompt_tokens"] - t["cached_tokens"] for t in turns)
    theirs_total = sum(u["prompt_tokens"] - u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
    print(f"prefilled in all: k3-backend {ours_total}, mlx_lm.server {theirs_total}")
    print(
        f"wall: k3-backend {wall:.2f} s, mlx_lm.server {peer_wall:.2f} s "
        f"(runs: {', '.join(f'{r[2] / r[0]:.2f}' for r in results)})"
    )
    print(
        f"k3-backend's engine: prefill {spent['prefill']:.2f} s, decode {spent['decode']:.2f} s, "
        f"the rest {wall - spent['prefill'] - spent['decode']:.2f} s (tokens, tools, the wire)"
    )
    print(f"ratio tool_loop_speedup = {statistics.median(r[2] / r[0] for r in results):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
