"""The result store's key and lookup on their own: every input the model sees is in the key, and a lookup asks a
bounded number of other people's tool calls again, the asker's own result first. (Between people on a real
daemon: tests/security/test_store_poisoning.py and test_team_store.py.)"""

from __future__ import annotations

import pytest

from backend.agent import AgentConfig, seen
from backend.dist import load_tokenizer
from backend.store import MAX_REPLAYS, ResultStore
from k3lsp.wire.protocol import EFFORTS

REQUEST = {
    "path": "src/f.c",
    "unit": "f",
    "code": "int f(int n)\n{\n\treturn n;\n}\n",
    "context": "#include <stddef.h>",
    "first_line": 10,
    "thinking_effort": "low",
}


@pytest.fixture(scope="module")
def tok(tiny_model):
    return load_tokenizer(str(tiny_model), trust_remote_code=True)


async def test_every_input_the_model_sees_is_in_the_key(tok):
    config = AgentConfig()
    base = await seen(tok, config, REQUEST)
    assert len(base) == len(EFFORTS) - EFFORTS.index("low")  # its own view, then one per higher effort
    changes = {
        "path": {"path": "src/g.c"},
        "unit name": {"unit": "g"},
        "first line": {"first_line": 11},
        "code": {"code": REQUEST["code"].replace("n;", "n + 1;")},
        "context": {"context": "#include <string.h>"},
        "effort": {"thinking_effort": "high"},
        "budget": {"max_tokens": 64},
    }
    for what, change in changes.items():
        assert (await seen(tok, config, REQUEST | change))[0] != base[0], what
    assert (await seen(tok, config, REQUEST | {"thinking_effort": "high"}))[0] == base[1]  # the ladder's next rung
    assert (await seen(tok, config, REQUEST | {"max_tokens": 64}))[1:] == base[1:]  # higher efforts: their budget
    for other in (AgentConfig(temp=0.5), AgentConfig(top_p=0.5), AgentConfig(max_tool_rounds=1)):
        assert (await seen(tok, other, REQUEST))[0] != base[0]
    assert await seen(tok, AgentConfig(), dict(REQUEST)) == base  # and nothing else: the same request, the same key


async def test_a_lookup_tries_the_askers_own_first_and_asks_a_bounded_number_of_others_again(tmp_path):
    store = ResultStore(tmp_path / "store.sqlite3", 1 << 20, hooks=None, prompt_version="v")
    asked: list[str] = []

    async def nothing(kind: str, **fields) -> None:
        pass

    def answering(text: str):
        async def ask_tool(tool: str, args: dict) -> tuple[bool, str]:
            asked.append(args["who"])
            return True, text

        return ask_tool

    def audit(who: str):
        async def run(send, ask_tool) -> dict:
            await ask_tool("read_lines", {"who": who})
            return {"finish_reason": "stop", "generated_tokens": 1, "by": who}

        return run

    for who in ("p0", "p1", "p2", "p3", "p4", "alice"):  # everyone's workspace answers otherwise
        await store.answer(["view"], "fp", who, False, nothing, answering(f"{who}'s file"), audit(who))
    asked.clear()
    mine = await store.answer(["view"], "fp", "alice", False, nothing, answering("alice's file"), audit("late"))
    assert mine["from_store"] is True and asked == ["alice"]  # her own result, checked first
    asked.clear()
    passed_over = store.stats()["mismatched"]
    bob = await store.answer(["view"], "fp", "bob", False, nothing, answering("bob's file"), audit("bob"))
    assert not bob.get("from_store") and bob["by"] == "bob"  # nobody's answers were his: the model was asked
    assert asked == [f"p{i}" for i in range(MAX_REPLAYS)] + ["bob"]  # the oldest others' calls again, then his run
    assert store.stats()["mismatched"] - passed_over == MAX_REPLAYS
    store.close()
