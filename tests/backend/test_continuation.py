"""A renderer that does not render tool results as an append: the tool loop still works (whole re-render).

Here the template drops an assistant's text once anything follows it, so the conversation up to the
assistant turn is not a prefix of the conversation with the tool result. The agent cannot append; it renders
the whole conversation instead, says so in the log, and the round costs a prompt-cache miss, nothing else.
"""

import json
import logging
import shutil

import pytest

from backend import prompts
from backend.agent import AgentConfig
from backend.dist import load_tokenizer
from backend.engine import Engine, EngineArgs
from backend.script import parse_script
from tests.support.agent import recording_agent
from tests.support.kimi import finding, turn

READ = ("read_lines", {"path": "a.c", "start": 1, "end": 4})
SCRIPT = parse_script(
    [
        {
            "unit": "f",
            "turns": [
                turn(READ, content="Let me read a.c.", dialect="jinja"),
                turn(("report_finding", finding()), dialect="jinja"),
            ],
        }
    ]
)


@pytest.fixture(scope="module")
def quirky(jinja_model, tmp_path_factory):
    path = shutil.copytree(jinja_model, tmp_path_factory.mktemp("quirky") / "tiny")
    config = json.loads((path / "tokenizer_config.json").read_text())
    plain = "{%- if m.content is string -%}{{ m.content }}{%- endif -%}"
    assert plain in config["chat_template"]
    config["chat_template"] = config["chat_template"].replace(
        plain, "{%- if m.content is string and (m.role != 'assistant' or loop.last) -%}{{ m.content }}{%- endif -%}"
    )
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def test_such_a_renderer_is_noticed(quirky):
    tok = load_tokenizer(str(quirky))
    specials = prompts.special_strings(tok)
    messages = prompts.audit_messages(path="a.c", unit="f", code="int f(void)\n{\n\treturn 0;\n}", specials=specials)
    call = prompts.ToolCall(*READ, 1)
    with pytest.raises(prompts.ContinuationError):
        prompts.continuation(
            tok,
            messages,
            prompts.assistant_message("Let me read a.c.", [call]),
            [prompts.tool_message(call, "int f;", specials)],
            prompts.AUDIT_TOOLS,
            "low",
        )


async def test_the_tool_loop_still_finishes_by_rendering_the_whole_conversation(quirky, caplog):
    engine = Engine(EngineArgs(model=str(quirky)), hooks=SCRIPT)

    async def ask_tool(tool: str, args: dict) -> tuple[bool, str]:
        return True, "int f(void)\n{\n\treturn 0;\n}"

    req = {"path": "a.c", "unit": "f", "code": "int f(void)\n{\n\treturn 0;\n}", "context": ""}
    async with recording_agent(engine, AgentConfig(max_tokens=2000, deadline=120), ask_tool) as (agent, sent):
        with caplog.at_level(logging.WARNING, logger="backend.agent"):
            stats = await agent.audit(req)
    assert [f["finding"] for k, f in sent if k == "finding"] == [finding()]
    assert stats["finish_reason"] == "stop" and stats["tool_calls"] == 1 and stats["rounds"] == 2
    assert "re-rendering the whole conversation" in caplog.text
    first, second = stats["turns"]
    assert second["cached_tokens"] < first["prompt_tokens"] + first["generated_tokens"]  # the price: a miss
