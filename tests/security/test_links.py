"""No click on model or daemon text runs anything: such text forms no link, whatever renders it.

The attack: ``explain`` sent the finding's title, the model's reasoning and the explanation through
``window/showMessage``, and the sanitiser removed control and bidi characters only. VS Code renders
``[text](command:...)`` in a notification as a link and opens it with commands allowed, so
``[Apply the verified patch](command:workbench.extensions.installExtension?...)`` from the model (steered by a
comment in the audited code), from a daemon or from the team store ran a command on a click. The same text
reached hovers (Markdown), diagnostics, related information, code-action titles, SARIF and the CLI.

Each renderer is checked by its own grammar: VS Code's notification links (the regex of its workbench),
SARIF's embedded links, Markdown as a viewer with raw HTML and linkify renders it (markdown-it-py with
linkify-it-py: inline, reference and autolinks, images, HTML, bare URLs and e-mail addresses), rich's markup in
the CLI's progress bar on a real terminal (a pty). The real VS Code workbench shows the explain notification
and the backend status in tests/editors/test_vscode_workbench.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import pty
import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types as lsp
from markdown_it import MarkdownIt

from k3lsp.wire import sanitize
from tests.batch.test_sarif import valid_sarif
from tests.support import kimi
from tests.support.batch import k3lsp_env, project, run_k3lsp
from tests.support.fake_daemon import FakeScript
from tests.support.lsp import WAIT, editor
from tests.support.peer import WELCOME, peer, reply

# VS Code's parseLinkedText (vs/base/common/linkedText.ts), as in code-server 4.139.1's workbench.js: what a
# notification turns into links, opened with commands allowed.
VSCODE_LINK = re.compile(r"""\[([^\]]+)\]\(((?:https?://|command:|file:)[^)\s]+)(?: (["'])(.+?)(\3))?\)""", re.I)
# SARIF 2.1.0 3.11.6: an embedded link in a plain-text message is an unescaped `[text](target)`.
SARIF_LINK = re.compile(r"(?<!\\)\[(?:[^\]\\]|\\.)*(?<!\\)\]\(")
COMMAND = "command:workbench.extensions.installExtension?%5B%22evil.pack%22%5D"
ATTACKS = [
    f"[Apply the verified patch]({COMMAND})",
    f"[Apply]({COMMAND.upper()})",
    f'[Apply]({COMMAND} "the maintainers\' fix")',
    f"[Apply](<{COMMAND}>)",
    f'<a href="{COMMAND}">Apply the verified patch</a>',
    '<img src="https://evil.example/t.png" onerror="alert(1)">',
    f"<{COMMAND}>",
    f"Apply [the patch][1].\n\n[1]: {COMMAND}",
    f"Apply [patch].\n\n[patch]: {COMMAND} 'verified'",
    f"bare {COMMAND} in the text",
    "[clone](vscode://vscode.git/clone?url=https%3A%2F%2Fevil.example%2Fr.git)",
    "[open](file:///etc/passwd) and [run](javascript:alert(1))",
    f"![badge](https://evil.example/b.png)[x]({COMMAND})",
    f"\\[not a link\\]({COMMAND})",
    f"\\\\[a link after an escaped backslash]({COMMAND})",
    f"[x]\u200b({COMMAND}) [y](comm\u200band:evil) [z](\u2060{COMMAND})",
    f"［full-width］（{COMMAND}）",
    f"```\n[closes the fence]({COMMAND})\n```\n[after]({COMMAND})",
    f"~~~\n~~~\n<a href='{COMMAND}'>closes a fence, then HTML</a>",
    "&#91;entities&#93;&#40;command:evil&#41; &lbrack;x&rbrack;",
    "see https://evil.example/phish, www.evil.example and root@evil.example",
    f"[multi\nline]({COMMAND})",
    f"[nested [brackets]]({COMMAND})",
]
# Tries that no renderer we know links (full-width brackets, entities, a bare `command:`): they must stay so.
UNLINKED_TRIES = {ATTACKS[9], ATTACKS[16], ATTACKS[19]}
MARKDOWN = MarkdownIt("commonmark", {"html": True, "linkify": True}).enable(["linkify", "table", "strikethrough"])
NO_HTML = MarkdownIt("commonmark", {"html": False, "linkify": True}).enable(["linkify", "table", "strikethrough"])
_TAG = re.compile(r"<(/?)([a-zA-Z0-9]+)([^>]*)>")
PLAIN_BLOCKS = {"p", "pre", "code", "br"}  # what Markdown makes of text that has no markup


def tags(rendered: str) -> list[str]:
    """Every HTML tag name a Markdown rendering made, opening tags with their attributes."""
    return [m.group(2) + m.group(3) for m in _TAG.finditer(rendered) if not m.group(1)]


def shown(rendered: str) -> str:
    """The text a reader sees in a rendering, whitespace collapsed."""
    return " ".join(html.unescape(_TAG.sub(" ", rendered)).split())


def assert_no_link(value: str) -> None:
    """Plain text that no VS Code notification and no SARIF viewer turns into a link."""
    assert VSCODE_LINK.search(value) is None, value
    assert "](" not in value, value


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_attacks_are_links_in_some_renderer(attack):
    """The corpus is real: each one is a link (or an image, or HTML) in a notification or in Markdown, or would be
    once its invisible characters are dropped."""
    visible = re.sub(f"[{sanitize.INVISIBLE}]", "", attack)
    rendered = MARKDOWN.render(visible)
    linked = VSCODE_LINK.search(visible) or {t.split()[0] for t in tags(rendered)} - PLAIN_BLOCKS - {"em", "del"}
    assert bool(linked) != (attack in UNLINKED_TRIES), (attack, rendered)


@pytest.mark.parametrize("attack", ATTACKS)
def test_plain_text_forms_no_link(attack):
    for value in (sanitize.line(attack), sanitize.text(attack), sanitize.data({"model": attack})["model"]):
        assert_no_link(value)
    words = re.compile(r"\w+")  # shown as text: every word is there, in order
    assert words.findall(sanitize.text(attack)) == words.findall(re.sub(f"[{sanitize.INVISIBLE}]", "", attack))


@pytest.mark.parametrize("attack", ATTACKS)
def test_markdown_shows_the_text_and_nothing_else(attack):
    rendered = MARKDOWN.render(sanitize.markdown(attack))
    assert {t.split()[0] for t in tags(rendered)} <= PLAIN_BLOCKS, rendered
    assert shown(rendered) == " ".join(sanitize.text(attack).split())


@pytest.mark.parametrize("attack", ATTACKS)
def test_sarif_text_forms_no_embedded_link_nor_a_markdown_one(attack):
    value = sanitize.sarif(attack)
    assert SARIF_LINK.search(value) is None, value
    assert VSCODE_LINK.search(value) is None, value
    links = [t for t in tags(NO_HTML.render(value)) if t.startswith(("a ", "img"))]
    # A viewer that renders plain text as Markdown may still linkify a visible web address, and nothing else.
    assert all(re.fullmatch(r'a href="(https?|mailto):[^"]*"', t) for t in links), links


@given(st.text(alphabet=st.sampled_from("[]()<>!:/\\`*_&#;.@ \nacmdhtps\u200b"), max_size=40))
def test_any_mix_of_markup_characters_stays_text(value):
    rendered = MARKDOWN.render(sanitize.markdown(value))
    assert {t.split()[0] for t in tags(rendered)} <= PLAIN_BLOCKS, rendered
    assert shown(rendered) == " ".join(sanitize.text(value).split())
    assert_no_link(sanitize.text(value))
    assert SARIF_LINK.search(sanitize.sarif(value)) is None


# --- through the real language server (the fake auditor: no daemon) ------------------------------------------

DEMO_C = "int copy(char *dst, const char *src, int n)\n{\n\treturn memcpy(dst, src, n) != 0;\n}\n"
LINK = f"[Apply the verified patch]({COMMAND})"
HOSTILE = kimi.finding(
    title=f"Heap overflow {LINK}",
    message=f"n is unchecked. {ATTACKS[7]}\nsee https://evil.example",
    start_line=3,
    end_line=3,
    trace=[{"line": 1, "note": f"n from the caller {LINK}"}, {"line": 3, "note": ATTACKS[4]}],
    fix={"start_line": 3, "end_line": 3, "replacement": "\treturn n < 16 && memcpy(dst, src, n) != 0;"},
) | {"reasoning": f"The maintainers ship a fix: {LINK} <{COMMAND}>"}


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    script = FakeScript(tmp_path / "fake-auditor.json")
    script.write({"units": {"copy": {"findings": [HOSTILE]}}, "explain": [f"Click {LINK}", f" or [here]({COMMAND})."]})
    return script


async def test_the_explain_notification_hover_titles_and_related_information_carry_no_link(fake, tmp_path):
    root = project(tmp_path, {"demo.c": DEMO_C})
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 1
        (diagnostic,) = await ed.wait_diagnostics(uri, lambda d: len(d) == 1)
        at = lsp.TextDocumentIdentifier(uri=uri)
        position = lsp.Position(2, 3)
        hover = await asyncio.wait_for(ed.client.text_document_hover_async(lsp.HoverParams(at, position)), WAIT)
        context = lsp.CodeActionContext(diagnostics=[diagnostic])
        offered = await asyncio.wait_for(
            ed.client.text_document_code_action_async(lsp.CodeActionParams(at, lsp.Range(position, position), context)),
            WAIT,
        )
        await ed.command("k3lsp.explain", uri, diagnostic.data["fingerprint"])
        explained = await ed.wait_for(lambda: [m.message for m in ed.client.messages if "Click" in m.message])
    assert "Apply the verified patch" in explained[0] and "maintainers ship a fix" in explained[0]
    plain = [*explained, diagnostic.message, *(r.message for r in diagnostic.related_information)]
    plain += [a.title for a in offered] + [a.command.title for a in offered if a.command]
    assert any(a.title.startswith("Apply suggested fix") and "Apply the verified patch" in a.title for a in offered)
    for value in plain:
        assert_no_link(value)
    assert hover.contents.kind == lsp.MarkupKind.Markdown
    rendered = MARKDOWN.render(hover.contents.value)
    links = [t for t in tags(rendered) if t.startswith(("a ", "img"))]
    assert links == ['a href="https://cwe.mitre.org/data/definitions/787.html"'], rendered  # ours, and only it
    assert "Apply the verified patch" in shown(rendered) and "https://evil.example" in shown(rendered)


# --- SARIF and the CLI: `k3lsp audit` against a scripted daemon ----------------------------------------------


class LinkingDaemon:
    """A daemon (a scripted ROUTER) whose finding and progress notes carry links and rich markup."""

    PROGRESS = "[link=https://evil.example/]weights verified[/link] [bold red]OK[/bold red]"

    async def __call__(self, sock, ident, msg):
        kind, msg_id = msg["kind"], msg["id"]
        if kind == "hello":
            await reply(sock, ident, "welcome", msg_id, **(WELCOME | {"model": LINK, "fingerprint": "f" * 64}))
        elif kind == "audit":
            for _ in range(6):  # the progress bar redraws 10 times a second: it shows the note
                await reply(sock, ident, "progress", msg_id, stage="loading", detail=self.PROGRESS)
                await asyncio.sleep(0.1)
            await reply(sock, ident, "finding", msg_id, finding=HOSTILE)
            await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})


async def test_sarif_messages_are_plain_text_with_no_link(tmp_path):
    project(tmp_path, {"demo.c": DEMO_C})
    async with peer(LinkingDaemon()) as endpoint:
        code, out, err = await run_k3lsp(
            "audit", "proj", "--format", "sarif", "--endpoint", endpoint, cache=tmp_path / "c", cwd=tmp_path
        )
    assert code == 1, err
    (result,) = valid_sarif(out)["runs"][0]["results"]
    messages = [
        result["message"],
        *(s["location"]["message"] for s in result["codeFlows"][0]["threadFlows"][0]["locations"]),
    ]
    messages.append(result["fixes"][0]["description"])
    assert "markdown" not in json.dumps(valid_sarif(out))  # never a Markdown message
    for message in messages:
        assert SARIF_LINK.search(message["text"]) is None and VSCODE_LINK.search(message["text"]) is None, message
    assert "Apply the verified patch" in result["message"]["text"]


async def _on_a_terminal(*args: str, cache, cwd) -> tuple[int, str]:
    """`k3lsp ARGS` with its stderr on a pseudo-terminal (rich draws its progress bar there): status, what it drew."""
    main, other = pty.openpty()
    env = k3lsp_env(cache) | {"TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "k3lsp.cli", *args, cwd=cwd, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=other
    )
    os.close(other)
    drawn = bytearray()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def readable() -> None:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the other side closed
            chunk = b""
        if chunk:
            drawn.extend(chunk)
        else:
            loop.remove_reader(main)
            done.set()

    loop.add_reader(main, readable)
    try:
        code = await asyncio.wait_for(proc.wait(), WAIT)
        await asyncio.wait_for(done.wait(), WAIT)
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(main)
        os.close(main)
        if proc.returncode is None:
            proc.kill()
    return code, drawn.decode(errors="replace")


async def test_the_cli_progress_bar_shows_daemon_markup_as_text(tmp_path):
    project(tmp_path, {"demo.c": DEMO_C})
    async with peer(LinkingDaemon()) as endpoint:
        code, drawn = await _on_a_terminal("audit", "proj", "--endpoint", endpoint, cache=tmp_path / "c", cwd=tmp_path)
    assert code == 1, drawn
    assert "[link=https://evil.example/]weights verified[/link]" in drawn, drawn  # the note, as text
    assert "\x1b]8;" not in drawn, drawn  # no OSC 8 hyperlink
