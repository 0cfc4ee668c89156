"""One agent on a real engine in this process (no daemon, no sockets): what it sends is recorded."""

import contextlib
from collections.abc import AsyncIterator

from backend.agent import Agent, AgentConfig, AskTool
from backend.engine import Engine
from backend.scheduler import Scheduler


@contextlib.asynccontextmanager
async def recording_agent(
    engine: Engine, config: AgentConfig, ask_tool: AskTool
) -> AsyncIterator[tuple[Agent, list[tuple[str, dict]]]]:
    """(the agent, the (kind, fields) of every message it sends, in order), on a started scheduler around
    ``engine`` that is closed when the block ends."""
    scheduler = Scheduler(engine)
    scheduler.start()
    sent: list[tuple[str, dict]] = []

    async def send(kind: str, **fields) -> None:
        sent.append((kind, fields))

    try:
        yield Agent(scheduler, config, send, ask_tool), sent
    finally:
        await scheduler.close()
