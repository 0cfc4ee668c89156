"""An agent that stops reading a generation (its client is gone) cancels it in the engine at once."""

import pytest

from backend.agent import Agent, AgentConfig
from backend.engine import Engine, EngineArgs
from backend.scheduler import Scheduler
from backend.script import parse_script
from tests.support.kimi import finding, turn

# The answer streams a long response (the model's own output might never leave its think channel).
SCRIPT = parse_script([{"unit": "f", "turns": [turn(content="The copy is unbounded. " * 40)]}])


class ClientGone(Exception):
    pass


async def test_leaving_a_generation_early_cancels_it_before_the_error_propagates(tiny_model):
    engine = Engine(EngineArgs(model=str(tiny_model), max_tokens=2000, trust_remote_code=True), hooks=SCRIPT)
    sched = Scheduler(engine)
    cancels: list[int] = []
    real_cancel = sched.cancel
    sched.cancel = lambda rid: (cancels.append(rid), real_cancel(rid))  # type: ignore[method-assign]
    sched.start()

    async def send(kind: str, **fields) -> None:
        if kind == "text":
            raise ClientGone

    async def ask_tool(tool: str, args: dict) -> tuple[bool, str]:
        return False, "no tools here"

    agent = Agent(sched, AgentConfig(max_tokens=2000, deadline=120), send, ask_tool)
    req = {
        "path": "a.c",
        "unit": "f",
        "code": "int f(void)\n{\n\treturn 0;\n}",
        "context": "",
        "finding": finding(start_line=1, end_line=2),
    }
    try:
        with pytest.raises(ClientGone):
            await agent.explain(req)  # no wait_for: a task boundary would let a GC-scheduled aclose run first
        assert len(cancels) == 1  # already, not whenever the abandoned stream is collected
    finally:
        await sched.close()
