"""ToolAnswerer: the model's tool calls are bounded in time and need a workspace folder."""

from __future__ import annotations

import asyncio

from k3lsp.core.answers import ToolAnswerer
from k3lsp.tools import sandbox, search


def answerer(seen: list) -> ToolAnswerer:
    return ToolAnswerer(on_tool=lambda *call: seen.append(call))


async def test_a_tool_call_that_outlives_its_bound_is_answered_with_a_refusal(tmp_path, monkeypatch):
    (tmp_path / "aaa.c").write_text("/* " + "a" * 64 + "! */\n")
    monkeypatch.setattr(search, "ripgrep", lambda: None)  # Python's re, which this line keeps busy for seconds
    monkeypatch.setattr(sandbox, "TOOL_SECONDS", 0.5)  # below GREP_SECONDS: the answerer's bound answers first
    seen: list = []
    request = {"tool": "grep", "args": {"pattern": "(a|aa)+$", "path": "aaa.c"}}
    ok, text = await asyncio.wait_for(answerer(seen).answer(tmp_path, request), 30)
    assert not ok and text == "grep: no answer within 0.5 s; ask for less"
    assert seen == [(request, False, text)]  # logged like any refusal


async def test_no_workspace_folder_means_no_tools(tmp_path):
    (tmp_path / "demo.c").write_text("int x;\n")
    request = {"tool": "read_lines", "args": {"path": "demo.c", "start": 1, "end": 1}}
    ok, text = await answerer([]).answer(None, request)
    assert not ok and "no workspace folder holds this file" in text
    assert (await answerer([]).answer(tmp_path, request))[0]
