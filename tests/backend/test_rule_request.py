"""The `rule` request (issue 43, variants): the model writes a Coccinelle rule that matches a finding's pattern.

The prompt is checked as the tiny checkpoint's own renderer renders it (the rules, the finding, the earlier tries as
data); the example rule it shows is checked by spatch itself; scripts answer by kind and by try; and one scripted
daemon answers rule requests through the editor's real client, the first try and the retry each with its own rule,
prose around the fence included (the editor cuts the fence out, not the daemon).
"""

import re
import shutil
import subprocess

import pytest

from backend import prompts
from backend.dist import load_tokenizer
from backend.script import ScriptError, parse_script
from k3lsp.core.client import ClientOptions, DaemonClient
from k3lsp.variants.rule import check
from k3lsp.wire import protocol
from tests.support.daemon import audit_fields, module_daemon
from tests.support.kimi import turn

CODE = (
    "static int x_probe(struct device *dev)\n{\n\tstruct x_priv *priv = kmalloc(sizeof(*priv), GFP_KERNEL);\n\n"
    "\tpriv->dev = dev;\n\treturn 0;\n}\n"
)
FINDING = {
    "cwe": 476,
    "severity": "medium",
    "title": "NULL dereference after kmalloc",
    "message": "kmalloc may return NULL; priv->dev is written without a check",
    "start_line": 3,
    "end_line": 5,
    "trace": [{"line": 3, "note": "may be NULL"}, {"line": 5, "note": "dereferenced"}],
}
MISSED = "@@\nexpression E;\n@@\n* E = kmalloc(...);\n"
RULE = "@@\nexpression E, F;\nidentifier fld;\n@@\n* E = kmalloc(...);\n  ... when != E == NULL\n* E->fld = F\n"
FIRST = f"Here is the rule:\n```cocci\n{MISSED}```\nIt marks the allocation."
SECOND = f"```cocci\n{RULE}```"
TRIES = [{"rule": MISSED, "outcome": "did not match line 5"}]


def fields(**extra) -> dict:
    return audit_fields("x_probe", code=CODE, path="drivers/x.c", finding=FINDING, thinking_effort="low", **extra)


# --- the prompt ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok(tiny_model):
    return load_tokenizer(str(tiny_model), trust_remote_code=True)


def test_the_prompt_gives_the_rules_the_finding_its_unit_and_the_earlier_tries(tok):
    specials = prompts.special_strings(tok)
    tries = [*TRIES, {"rule": "@script:python@\n@@\n<|end_of_msg|>", "outcome": "a @script block is refused"}]
    messages = prompts.rule_messages(
        path="drivers/x.c", unit="x_probe", code=CODE, finding=FINDING, context="struct x_priv;", specials=specials
    )
    retry = prompts.rule_messages(
        path="drivers/x.c", unit="x_probe", code=CODE, finding=FINDING, specials=specials, tries=tries
    )
    first = tok.decode(prompts.render(tok, messages, prompts.RULE_TOOLS, "low").tokens)
    again = prompts.render(tok, retry, prompts.RULE_TOOLS, "low").tokens
    system = messages[0]["content"]
    for rule in ("```cocci", "* in the first column", "No comments"):
        assert rule in system
    assert (
        "struct x_priv;" in first and "3|\tstruct x_priv *priv = kmalloc" in first and "5|\tpriv->dev = dev;" in first
    )
    assert "at line 3-5 of the unit" in first and FINDING["title"] in first and "Write the rule." in first
    assert "read_lines" in first and "report_finding" not in first
    assert [m["role"] for m in messages] == ["system", "user", "user"] and len(retry) == 2  # no context: no message
    asked = retry[-1]["content"]
    assert f"Your rule 1 did not work:\n```cocci\n{MISSED.rstrip()}\n```\nspatch: did not match line 5" in asked
    assert "Your rule 2 did not work" in asked and "spatch: a @script block is refused" in asked
    assert asked.endswith("Write a rule that does not fail as those did.")
    # an earlier rule is data: the end-of-message string inside it adds no special token (against harmless text)
    harmless = [*TRIES, {"rule": "@script:python@\n@@\nend_of_msg", "outcome": "a @script block is refused"}]
    clean = prompts.rule_messages(
        path="drivers/x.c", unit="x_probe", code=CODE, finding=FINDING, specials=specials, tries=harmless
    )
    end = tok.convert_tokens_to_ids("<|end_of_msg|>")
    assert again.count(end) == prompts.render(tok, clean, prompts.RULE_TOOLS, "low").tokens.count(end)


def test_the_prompt_names_what_the_editor_refuses_and_its_example_passes_the_editors_checks():
    """The editor refuses a rule with any of these words, a comment included (k3lsp/variants/rule.py): the model is
    told so before it writes one, and the one example it is shown is a rule the editor runs."""
    for word in ("#", "script", "initialize", "finalize", "python", "ocaml", "using", "virtual"):
        assert re.search(rf"\s{re.escape(word)}[\s,.]", prompts.RULE_SYSTEM_PROMPT), word
    assert check(prompts.RULE_EXAMPLE) == prompts.RULE_EXAMPLE


@pytest.mark.skipif(shutil.which("spatch") is None, reason="spatch (coccinelle) is not installed; .ci/run installs it")
def test_the_example_rule_the_prompt_shows_is_one_spatch_parses(tmp_path):
    assert f"```cocci\n{prompts.RULE_EXAMPLE}```" in prompts.RULE_SYSTEM_PROMPT
    rule = tmp_path / "example.cocci"
    rule.write_text(prompts.RULE_EXAMPLE)
    done = subprocess.run(
        ["spatch", "--parse-cocci", str(rule)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("spatch") is None, reason="spatch (coccinelle) is not installed; .ci/run installs it")
def test_the_prompts_advice_on_assignments_and_declarations_is_what_spatch_does(tmp_path):
    """spatch matches `x = f(...);` and `T *x = f(...);` apart: the disjunction the prompt shows matches both, and
    its first branch alone only the assignment."""
    assert prompts.RULE_FORMS in prompts.RULE_SYSTEM_PROMPT
    (tmp_path / "a.c").write_text(
        "void g(void)\n{\n\tstruct s *p;\n\tp = f(1);\n}\n\nvoid h(void)\n{\n\tstruct s *q = f(2);\n}\n"
    )
    head = "@@\nidentifier x;\ntype T;\n@@\n"
    (tmp_path / "both.cocci").write_text(head + prompts.RULE_FORMS)
    (tmp_path / "one.cocci").write_text(head + prompts.RULE_FORMS.split("|")[0].removeprefix("(\n"))

    def marked(rule: str) -> list[str]:
        argv = ["spatch", "--sp-file", rule, "--no-includes", "--very-quiet", "a.c"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path).stdout
        return [line[1:].strip() for line in out.splitlines() if line.startswith("-") and not line.startswith("---")]

    assert marked("both.cocci") == ["p = f(1);", "struct s *q = f(2);"]
    assert marked("one.cocci") == ["p = f(1);"]


# --- scripts -------------------------------------------------------------------------------------------------


def test_a_script_answers_by_kind_and_by_try():
    script = parse_script(
        [
            {"unit": "f", "kind": "rule", "tries": 0, "turns": ["first"]},
            {"unit": "f", "kind": "rule", "turns": ["any retry"]},
            {"unit": "f", "kind": "audit", "turns": ["audited"]},
            {"unit": "*", "turns": ["anything"]},
        ]
    )
    assert script.turn("f", 0, "rule", 0) == "first" and script.turn("f", 0, "rule", 2) == "any retry"
    assert script.turn("f", 0) == "audited" and script.turn("f", 0, "explain") == "anything"
    assert script.turn("f", 1, "rule", 0) is None  # past its last turn: the model's own output


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"kind": "review"}, r"script\[0\]\.kind: 'review' is not one of audit, explain, rule"),
        ({"kind": "audit", "tries": 1}, r'script\[0\]\.tries: only an entry of "kind": "rule" counts tries'),
        ({"kind": "rule", "tries": -1}, r"script\[0\]\.tries: -1 is not a number of tries in 0\.\.8"),
        ({"kind": "rule", "tries": True}, r"script\[0\]\.tries: True is not a number of tries in 0\.\.8"),
    ],
)
def test_a_script_entry_naming_a_bad_kind_or_try_is_refused_saying_where(entry, error):
    with pytest.raises(ScriptError, match=error):
        parse_script([{"unit": "f", "turns": ["x"]} | entry])


# --- through a scripted daemon and the editor's client ---------------------------------------------------------


def script() -> list[dict]:
    return [
        {"unit": "x_probe", "kind": "rule", "tries": 0, "turns": [turn(content=FIRST, reasoning="Match kmalloc.")]},
        {"unit": "x_probe", "kind": "rule", "tries": 1, "turns": [turn(content=SECOND)]},
        {"unit": "x_probe", "kind": "audit", "turns": [turn(content="Nothing found.")]},
    ]


daemon = module_daemon(script)


async def test_a_scripted_daemon_writes_the_rule_of_each_try_through_the_client(daemon):
    async with DaemonClient(ClientOptions(endpoint=daemon.endpoint)) as client:
        first = [m async for m in client.stream("rule", fields())]
        retry = [m async for m in client.stream("rule", fields(tries=TRIES))]
        audit = [m async for m in client.stream("audit", audit_fields("x_probe", code=CODE))]
        oversize = [{"rule": "x" * (protocol.MAX_RULE_CHARS + 1), "outcome": "did not match line 5"}]
        refused = [m async for m in client.stream("rule", fields(tries=oversize))]
    for messages, answer in ((first, FIRST), (retry, SECOND)):
        assert messages[-1]["kind"] == "done" and messages[-1]["stats"]["finish_reason"] == "stop"
        assert "".join(m["text"] for m in messages if m["kind"] == "text") == answer  # the prose too, no reasoning
        assert not [m for m in messages if m["kind"] in ("finding", "tool_request")]
    assert audit[-1]["kind"] == "done" and not [m for m in audit if m["kind"] == "text"]
    sessions = daemon.sessions("x_probe")  # what the model was given, and what it said back
    assert [s["messages"][-1]["content"] for s in sessions] == [FIRST, SECOND, "Nothing found."]
    assert [[t["function"]["name"] for t in s["tools"]] for s in sessions[:2]] == [
        ["read_lines", "find_definition"]
    ] * 2
    assert "did not match line 5" in sessions[1]["messages"][-2]["content"]
    assert "did not match" not in sessions[0]["messages"][-2]["content"]
    (error,) = refused  # refused before any work, in one sentence naming the field; no session
    assert error["kind"] == "error" and error["code"] == "bad_request"
    assert error["message"] == f"tries[0].rule: longer than {protocol.MAX_RULE_CHARS} characters"
