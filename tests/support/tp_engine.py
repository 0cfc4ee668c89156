"""One rank of a tensor-parallel engine run: `python -m tests.support.tp_engine MODEL` under a ring hostfile.

Every rank feeds its Engine the same calls (SCRIPT: submits, then a cancel at a fixed step), as the
daemon's scheduler does, and prints one JSON line: per request its finish and generated tokens.
`python -m tests.support.tp_engine MODEL --single` runs the same calls on one unsharded process.
"""

import json
import sys

import mlx.core as mx

from backend.engine import Engine, EngineArgs
from tests.support.forcing import Forced

PROMPTS = ["static int counter;", "void f(char *p) { strcpy(buf, p); }", "int main(void)"]
CANCEL_AT_STEP = 6  # request 2 is cancelled here on every rank


def run(model: str, group) -> dict:
    forcing = Forced()  # every rank makes the same calls, so its engine answers alike
    engine = Engine(EngineArgs(model=model, max_tokens=64, trust_remote_code=True), group=group, hooks=forcing)
    tok = engine.tokenizer
    engine.submit(forcing.request(0, tok.encode(PROMPTS[0]), [], 20, 1.0, 0.95, seed=1))
    engine.submit(forcing.request(1, tok.encode(PROMPTS[1]), [], 40, 1.0, 0.95, seed=2, forced=tok.encode("safe")))
    engine.submit(forcing.request(2, tok.encode(PROMPTS[2]), [], 40, 1.0, 0.95, seed=3, forced=list(range(10, 60))))
    texts = {0: "", 1: "", 2: ""}
    finish: dict[int, str] = {}
    for step in range(500):
        if not engine.busy():
            break
        if step == CANCEL_AT_STEP:
            engine.cancel(2)
        for ev in engine.step():
            texts[ev.rid] += ev.text
            if ev.finish:
                finish[ev.rid] = ev.finish
    return {"ranks": engine.ranks, "finish": finish, "texts": texts}


def main() -> None:
    single = "--single" in sys.argv
    group = None if single else mx.distributed.init(strict=True, backend="ring")
    print(json.dumps({"rank": group.rank() if group else 0, **run(sys.argv[1], group)}), flush=True)


if __name__ == "__main__":
    main()
