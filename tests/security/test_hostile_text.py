"""Model and daemon text reaches people as text: no terminal commands, no bidi reordering, no rich markup.

The model writes what the audited code steers it to; a daemon may be someone else's. A finding title with
OSC 0 (window title), OSC 52 (clipboard), colour codes, a C1 CSI and U+202E once went raw to the terminal
from `k3lsp audit`, daemon error strings raw to stderr, `k3lsp status` read daemon strings as rich markup
(`[link=...]` became a hyperlink), and editors got bare control and bidi characters in diagnostics, hovers,
code-action titles and messages. JSON and SARIF escape such characters themselves: checked too.

The model's text goes through the real engine (a scripted daemon on the tiny checkpoint); the hostile daemon
is a scripted ROUTER that says whatever it likes.
"""

from __future__ import annotations

import asyncio
import json
import re

from lsprotocol import types as lsp

from k3lsp.wire import sanitize
from tests.batch.test_sarif import valid_sarif
from tests.support import kimi
from tests.support.batch import k3lsp, project, run_k3lsp
from tests.support.daemon import module_daemon
from tests.support.lsp import WAIT, editor
from tests.support.peer import WELCOME, peer, reply

OSC_TITLE, OSC_CLIPBOARD = "\x1b]0;owned\x07", "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"
TITLE = f"{OSC_TITLE}Heap overflow{OSC_CLIPBOARD} in \x1b[31mparse\x1b[0m \u202egnirts\u202c [bold]x[/bold]"
SHOWN_TITLE = "]0;ownedHeap overflow]52;c;Y3VybCBldmlsIHwgc2g= in [31mparse[0m gnirts [bold]x[/bold]"
MESSAGE = "n is\x9b2J unchecked\r\x1b[2Kall good\u2066 here"
NOTE = "from\x00 the \x1b[8mcaller"
TROJAN_FIX = "\tif (n < 16 /*\u202e } \u2066*/) buf[n] = 0;"  # Trojan Source: reads otherwise than it compiles
HOSTILE_FINDING = kimi.finding(
    title=TITLE,
    message=MESSAGE,
    start_line=3,
    end_line=3,
    trace=[{"line": 1, "note": NOTE}],
    fix={"start_line": 3, "end_line": 3, "replacement": TROJAN_FIX},
)
GARBLED = (
    kimi.opening()
    + kimi.OPEN_TOOLS
    + '<|open|>call tool="report_finding" index="1"<|sep|><|open|>json type="object"<|sep|>'
    '{"title": "' + OSC_TITLE + '" oops<|close|>json<|sep|><|close|>call<|sep|>' + kimi.CLOSE_TOOLS + kimi.END
)
HOSTILE_C = "int hostile(char *buf, int n)\n{\n\tbuf[n] = 0;\n\treturn n;\n}\n"
GARBLED_C = "int garbled(int n)\n{\n\treturn n;\n}\n"
PROJECT = {"hostile.c": HOSTILE_C, "garbled.c": GARBLED_C}


def script() -> list[dict]:
    return [
        {"unit": "hostile", "turns": [kimi.turn(("report_finding", HOSTILE_FINDING))]},
        {"unit": "garbled", "turns": [GARBLED]},  # an invalid call: the daemon logs its text
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


daemon = module_daemon(script)

_RAW = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{sanitize.BIDI_CONTROLS}]")


def raw_controls(text: str) -> list[str]:
    """Control characters (but newline and tab) and bidi controls in what a person would be shown."""
    return _RAW.findall(text)


def test_the_audit_prints_model_text_as_text_and_the_daemon_logs_it_so(daemon, tmp_path):
    project(tmp_path, PROJECT)
    result = k3lsp("audit", "proj", "--endpoint", daemon.endpoint, cache=tmp_path / "c", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert raw_controls(result.stdout) == [] and raw_controls(result.stderr) == []
    assert result.stdout.splitlines()[0] == f"proj/hostile.c:3:2: high CWE-787 {SHOWN_TITLE}"
    log = daemon.log_text()
    assert "invalid tool call text" in log and "]0;owned" in log  # the garbled call was logged, as text
    assert raw_controls(log) == []


def test_json_and_sarif_escape_what_they_carry_and_drop_a_trojan_source_fix(daemon, tmp_path):
    project(tmp_path, PROJECT)
    common = ("audit", "proj/hostile.c", "--endpoint", daemon.endpoint)
    as_json = k3lsp(*common, "--json", cache=tmp_path / "c", cwd=tmp_path)
    as_sarif = k3lsp(*common, "--format", "sarif", cache=tmp_path / "c", cwd=tmp_path)
    for out in (as_json.stdout, as_sarif.stdout):
        assert raw_controls(out) == [] and out.isascii()  # every control and non-ASCII character is escaped
    (finding,) = json.loads(as_json.stdout)["findings"]
    assert finding["title"] == SHOWN_TITLE and finding["message"] == "n is2J unchecked\n[2Kall good here"
    assert finding["trace"][0]["note"] == "from the [8mcaller" and finding["fix"] is None
    (result,) = valid_sarif(as_sarif.stdout)["runs"][0]["results"]
    assert result["message"]["text"].split("\n")[0] == sanitize.sarif(SHOWN_TITLE) and "fixes" not in result


class HostileDaemon:
    """A daemon (a scripted ROUTER) that puts terminal commands, bidi controls and rich markup everywhere."""

    MODEL = f"{OSC_TITLE}Kimi\u202e [link=https://evil.example/]click[/link]"
    ERROR = f"{OSC_CLIPBOARD}overloaded\x1b[2K\u2067 [link=https://evil.example/]retry[/link]"
    TOOL = f"read_lines{OSC_TITLE}"
    EXPLANATION = f"Because{OSC_CLIPBOARD} n\u202e is\r\x1b[2K unchecked."

    def __init__(self, refuse_hello: bool = False):
        self.refuse_hello = refuse_hello

    async def __call__(self, sock, ident, msg):
        kind, msg_id = msg["kind"], msg["id"]
        if kind == "hello" and self.refuse_hello:
            await reply(sock, ident, "error", msg_id, code="internal", message=self.ERROR)
        elif kind == "hello":
            welcome = WELCOME | {"model": self.MODEL, "server": f"0.1{OSC_TITLE}", "fingerprint": "f" * 64}
            await reply(sock, ident, "welcome", msg_id, **welcome)
        elif kind == "status":
            await reply(sock, ident, "status", msg_id, status={"model": self.MODEL, "queued": self.ERROR})
        elif kind == "audit" and msg["unit"] == "hostile":
            await reply(sock, ident, "tool_request", msg_id, call="c1", tool=self.TOOL, args={f"k{OSC_TITLE}": 1})
        elif kind == "tool_result":
            await reply(sock, ident, "finding", msg_id, finding=HOSTILE_FINDING)
            await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})
        elif kind == "audit":
            await reply(sock, ident, "error", msg_id, code="rank_failure", message=self.ERROR)
        elif kind == "explain":
            await reply(sock, ident, "text", msg_id, text=self.EXPLANATION)
            await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})


async def test_status_shows_daemon_strings_as_data_not_markup_or_commands(tmp_path):
    async with peer(HostileDaemon()) as endpoint:
        code, out, err = await run_k3lsp(
            "status", "--endpoint", endpoint, cache=tmp_path / "c", cwd=tmp_path, env={"COLUMNS": "200"}
        )
        assert code == 0, err
        assert raw_controls(out) == [] and "[link=https://evil.example/]" in out  # shown, not a hyperlink
        _, forced, _ = await run_k3lsp(
            "status",
            "--endpoint",
            endpoint,
            cache=tmp_path / "c",
            cwd=tmp_path,
            env={"FORCE_COLOR": "1", "COLUMNS": "200"},
        )
    assert "\x1b]8;" not in forced and "evil.example" in forced  # rich writes colours, never the data's link
    assert OSC_TITLE not in forced and "\u202e" not in forced
    async with peer(HostileDaemon(refuse_hello=True)) as endpoint:
        code, out, err = await run_k3lsp("status", "--endpoint", endpoint, cache=tmp_path / "c", cwd=tmp_path)
    assert code == 2 and "overloaded" in err and raw_controls(err) == []


async def test_the_audit_prints_daemon_errors_as_text(tmp_path):
    project(tmp_path, PROJECT)
    (tmp_path / "proj" / "hostile.c").unlink()
    async with peer(HostileDaemon()) as endpoint:
        code, out, err = await run_k3lsp("audit", "proj", "--endpoint", endpoint, cache=tmp_path / "c", cwd=tmp_path)
    assert code == 2 and "overloaded" in err
    assert raw_controls(err) == [] and raw_controls(out) == []


async def test_the_editor_gets_no_control_or_bidi_characters_from_the_model_or_the_daemon(tmp_path):
    root = project(tmp_path, PROJECT)
    async with (
        peer(HostileDaemon()) as endpoint,
        editor(root, settings={"endpoint": endpoint}, cache_dir=tmp_path / "c") as ed,
    ):
        uri = ed.open("hostile.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        assert summary["findings"] == 1, summary
        (diagnostic,) = await ed.wait_diagnostics(uri, lambda d: len(d) == 1)
        assert diagnostic.message.startswith(SHOWN_TITLE)
        shown = [diagnostic.message, *(r.message for r in diagnostic.related_information or [])]

        position = lsp.Position(2, 3)
        hover = await asyncio.wait_for(
            ed.client.text_document_hover_async(
                lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=position)
            ),
            WAIT,
        )
        actions = await asyncio.wait_for(
            ed.client.text_document_code_action_async(
                lsp.CodeActionParams(
                    text_document=lsp.TextDocumentIdentifier(uri=uri),
                    range=lsp.Range(position, position),
                    context=lsp.CodeActionContext(diagnostics=[diagnostic]),
                )
            ),
            WAIT,
        )
        titles = [a.title for a in actions]
        assert not any(t.startswith("Apply suggested fix") for t in titles)  # the Trojan Source fix is dropped
        fingerprint = diagnostic.data["fingerprint"]
        answer = await ed.command("k3lsp.explain", uri, fingerprint)
        assert "unchecked" in answer

        await ed.command("k3lsp.auditFile", ed.open("garbled.c"))  # the daemon's error: a warning
        status = await ed.status()
        await ed.wait_for(lambda: any("overloaded" in m.message for m in ed.client.messages))
        shown += [hover.contents.value, *titles, answer, json.dumps(status, ensure_ascii=False)]
        shown += [m.message for m in ed.client.messages] + [m.message for m in ed.client.log_messages]
        shown += [n["message"] for n in ed.status_notes]
    assert any("model tool read_lines]0;owned" in m for m in shown)  # the tool call was logged, as text
    assert any("Kimi [link=https://evil.example/]click[/link]" in m for m in shown)  # the welcome, as text
    assert [m for m in shown if raw_controls(m)] == []


def test_the_sanitiser_keeps_text_and_removes_commands():
    assert sanitize.line(TITLE) == SHOWN_TITLE
    assert sanitize.text("a\r\nb\rc\u2028d\te\x1b") == "a\nb\nc\nd\te"
    assert sanitize.line("  a\n\tb  ") == "a b" and sanitize.line(7) == "7"
    assert not sanitize.unsafe_code("\tint x;\r\n\f")
    assert sanitize.unsafe_code("x\u2067") and sanitize.unsafe_code("\x1b") and sanitize.unsafe_code(TROJAN_FIX)
    assert sanitize.data({"k\x1b": ["v\u202e", 1, None]}) == {"k": ["v", 1, None]}
