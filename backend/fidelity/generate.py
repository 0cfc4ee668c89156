"""`compare --generate N`: the generation-time behaviour the card never measured.

N audit sessions are sampled from the candidate with the daemon's own engine and defaults (the card's
sampling: temperature 1.0, top-p 0.95), from the opening prompts (system + tools + user turns) of the
BASE's traces, one assistant turn each. Reported: how each generation ended (stop token, length
limit, the daemon's loop guard), hence the loop rate and stop-token reliability, and how many tool
calls the turns made and how many of them did not parse.
"""

from backend.channels import Markers, initial_state
from backend.engine import Engine, EngineArgs, GenRequest
from backend.fidelity.forward import Loaded
from backend.prompts import parse_turn


def sample_sessions(cand: Loaded, prompts: list[list[int]], n: int, max_tokens: int, seed: int) -> dict:
    """Sample `n` turns (cycling over `prompts`, seeds seed..seed+n-1) and summarise how they ended."""
    if not prompts or n < 1 or max_tokens < 1:
        raise ValueError("sampling needs prompts, n >= 1 and max_tokens >= 1")
    args = EngineArgs(model=str(cand.path), max_tokens=max_tokens)
    engine = Engine(args, cand.model, cand.tokenizer, cand.group)
    for i in range(n):
        engine.submit(GenRequest(i, prompts[i % len(prompts)], [], max_tokens, args.temp, args.top_p, seed + i))
    texts = dict.fromkeys(range(n), "")
    steps = n * (max_tokens + 2 + max(map(len, prompts)) // args.prefill_step_size) + 16
    for event in engine.run_until_idle(steps):
        texts[event.rid] += event.text
    if engine.busy():
        raise RuntimeError(f"generation did not finish within {steps} engine steps")
    markers = Markers.of(cand.tokenizer)
    turns = [
        parse_turn(markers, text, initial_state(cand.tokenizer, prompts[i % len(prompts)])) for i, text in texts.items()
    ]
    stats = engine.stats()
    return {
        "sessions": n,
        "temp": args.temp,
        "top_p": args.top_p,
        "max_tokens": max_tokens,
        "finish": stats["finish"],
        "loop_rate": stats["loop_rate"],
        "stop_share": stats["stop_share"],
        "tool_calls": sum(len(t.calls) for t in turns),
        "tool_call_errors": sum(len(t.errors) for t in turns),
    }
