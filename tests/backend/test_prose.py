"""ProseStream, fed piece by piece, streams exactly the prose that parse_turn finds in the whole text."""

import asyncio

import pytest

from backend import prompts
from backend.agent import ProseStream
from tests.support.kimi import END, finding, turn

TEXTS = [
    turn(content="The length n reaches the copy unchecked; bound it first."),
    turn(("report_finding", finding()), content="Before the call. "),
    "Prose " + turn(("read_lines", {"path": "a.c", "start": 1, "end": 2})) + "after the section",
    "a <| b <|close|> c <|open|>tool d",  # marker-like text that is not a marker
    "unclosed <|open|>tools<|sep|><|open|>call never closed",
    "ends with <|close|>mess",
    "x" + END + "y<|end_of_msg|>z",
]


def stream(text: str, size: int) -> list[str]:
    sent: list[str] = []

    async def send(kind: str, **fields) -> None:
        assert kind == "text"
        sent.append(fields["text"])

    async def run() -> None:
        prose = ProseStream(send)
        for i in range(0, len(text), size):
            await prose.feed(text[i:i + size])
        await prose.finish()

    asyncio.run(run())
    return sent


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_streamed_prose_is_the_parsed_prose(text, size):
    pieces = stream(text, size)
    assert "".join(pieces) == prompts.parse_turn(text).content
    assert all(pieces)  # no empty text messages
