"""What every real client meets, through a real server: hover formats, settings that are removed, one publish per
change, code action kinds and no log noise from cancellations on the fake daemon (the answers are all these
need); findings from the cache on open and after a restart, status states and the backend status through a
scripted `k3-backend`."""

from __future__ import annotations

import asyncio
import itertools

import attrs
import pytest
from lsprotocol import types as lsp
from pytest_lsp import client_capabilities

from k3lsp.findings import model as findings
from k3lsp.lsp import session
from tests.lsp import scripted
from tests.support.lsp import WAIT, editor


@pytest.fixture
def root(tmp_path):
    return scripted.workspace(tmp_path)


def with_hover(formats: list[str], *, shows_diagnostics: bool = False) -> lsp.ClientCapabilities:
    caps = client_capabilities("visual-studio-code")
    hover = lsp.HoverClientCapabilities(content_format=formats)
    experimental = {"k3lsp": {"hoverShowsDiagnostics": True}} if shows_diagnostics else None
    return attrs.evolve(caps, text_document=attrs.evolve(caps.text_document, hover=hover), experimental=experimental)


def test_a_client_that_declares_nothing_gets_markdown_with_everything():
    assert session.hover_style(lsp.ClientCapabilities()) == findings.HoverStyle(markdown=True, shows_diagnostic=False)
    odd = lsp.ClientCapabilities(experimental={"k3lsp": "yes"})
    assert session.hover_style(odd) == findings.HoverStyle()


async def hover_at(ed, uri: str, line: int) -> lsp.Hover:
    params = lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line, 5))
    return await asyncio.wait_for(ed.client.text_document_hover_async(params), WAIT)


async def test_hover_in_the_format_the_client_asks_for(fake, root, tmp_path):
    caps = with_hover([lsp.MarkupKind.PlainText, lsp.MarkupKind.Markdown])
    async with editor(root, capabilities=caps, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
        hover = await hover_at(ed, uri, scripted.COPY_MSG_LINE)
    assert hover.contents.kind == lsp.MarkupKind.PlainText
    text = hover.contents.value
    assert text.startswith("memcpy overflows buf\n")
    assert "CWE-787 (https://cwe.mitre.org/data/definitions/787.html)" in text and "severity high" in text
    assert "sizeof(m->buf)" in text  # model text verbatim: no Markdown escapes
    assert "1. line 7: n is caller-controlled" in text
    assert "\tmemcpy(m->buf, src, min_t(int, n, sizeof(m->buf)));" in text
    for markup in ("**", "](", "```", "\\"):
        assert markup not in text, markup


async def test_a_client_that_shows_the_diagnostic_gets_only_what_it_lacks(fake, root, tmp_path):
    caps = with_hover([lsp.MarkupKind.Markdown], shows_diagnostics=True)
    async with editor(root, capabilities=caps, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
        text = (await hover_at(ed, uri, scripted.COPY_MSG_LINE)).contents.value
    for shown_by_the_diagnostic in ("memcpy overflows buf", "n comes from the caller", "n is caller-controlled"):
        assert shown_by_the_diagnostic not in text, text
    assert "severity **high**" in text and "confidence 90%" in text
    assert "min_t(int, n, sizeof(m->buf))" in text


async def test_a_removed_setting_gets_its_default_back(fake, root, tmp_path):
    settings = {"minSeverity": "high"}
    async with editor(root, settings=settings, configuration=settings, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        await ed.wait_diagnostics(uri, lambda ds: [d.code for d in ds] == ["CWE-787"])
        ed.client.set_configuration({}, section="k3lsp")  # minSeverity removed
        ed.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
    assert sorted(d.code for d in diags) == ["CWE-129", "CWE-787"]


async def test_findings_show_from_the_cache_on_open_and_after_a_restart(daemon, root, tmp_path):
    settings = {"endpoint": daemon.endpoint, "trigger": "manual"}  # nothing but the cache may show them
    async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
    async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:  # a new server: a restart
        uri = ed.open("demo.c")
        diags = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        counters = (await ed.status())["counters"]
    assert sorted(d.code for d in diags) == ["CWE-129", "CWE-787"]
    assert counters["sent"] == 0 and counters["cached"] == 2


async def test_each_change_is_published_once(fake, root, tmp_path):
    async with editor(root, configuration={}, fake=fake, cache_dir=tmp_path / "c") as ed:
        # VS Code announces its settings right after `initialized`, as this does.
        ed.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        uri = ed.open("demo.c")
        await ed.wait_for(lambda: ed.published)
        ed.save(uri)
        await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
        ed.save(uri)  # unchanged: served from the cache, nothing new to say
        await ed.wait_for_status(lambda c: c["cached"] >= 2)
        ed.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        await ed.status()  # a round trip after the settings change: its publishes, if any, came before
        published = [[d.code for d in diags] for u, diags in ed.published if u == uri]
        reads = ed.configuration_reads
    assert published[0] == [], published  # the first word on the file: nothing cached yet
    assert all(a != b for a, b in itertools.pairwise(published)), published
    assert published[-1] in (["CWE-787", "CWE-129"], ["CWE-129", "CWE-787"]), published
    assert reads == 2, reads  # at start one read answers both `initialized` and the announcement; then one more


async def test_every_action_is_a_quick_fix_so_kind_filters_offer_them(fake, root, tmp_path):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2

        async def actions(only: list[str] | None) -> list:
            diagnostics = [d for d in ed.client.diagnostics[uri] if d.range.start.line == scripted.COPY_MSG_LINE]
            params = lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri),
                range=lsp.Range(lsp.Position(scripted.COPY_MSG_LINE, 2), lsp.Position(scripted.COPY_MSG_LINE, 2)),
                context=lsp.CodeActionContext(diagnostics=diagnostics, only=only),
            )
            return list(await asyncio.wait_for(ed.client.text_document_code_action_async(params), WAIT) or [])

        every = await actions(None)
        quick = await actions([lsp.CodeActionKind.QuickFix])
        refactors = await actions([lsp.CodeActionKind.Refactor])
    assert len(every) == 6 and all(isinstance(a, lsp.CodeAction) for a in every), every
    assert {a.kind for a in every} == {lsp.CodeActionKind.QuickFix}
    assert all(a.diagnostics and a.diagnostics[0].code == "CWE-787" for a in every)
    assert [a.title for a in quick] == [a.title for a in every]
    assert refactors == []
    commands = {a.command.command for a in every if a.command}
    assert commands == {"k3lsp.explain", "k3lsp.findVariants", "k3lsp.suppressInBaseline", "k3lsp.reauditFunction"}


async def test_status_says_what_is_true_and_the_backend_status_has_its_figures(daemon, root, tmp_path):
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        await ed.wait_for(lambda: ed.status_notes)
        first = ed.status_notes[0]
        ed.open("demo.c")  # the cache lookup contacts the backend
        await ed.wait_for(lambda: ed.status_notes[-1]["state"] == "connected")
        states = [n["state"] for n in ed.status_notes]
        status = await ed.status()
    assert first["state"] == "disconnected" and "not connected yet" in first["message"], first
    assert daemon.endpoint in first["message"]
    assert states == ["disconnected", "connecting", "connected"], states
    assert status["endpoint"] == daemon.endpoint
    backend = status["backend"]
    for key in ("model", "ranks", "queued", "active", "loop_rate", "stop_rate"):
        assert key in backend, (key, backend)


async def test_a_late_cancel_is_not_logged(fake, root, tmp_path, capfd):
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        await hover_at(ed, uri, 0)
        ed.client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id=987654))  # long answered, or never sent
        await ed.status()
        await asyncio.sleep(0.5)  # the server's stderr is forwarded by a task of this loop
    assert "Cancel notification for unknown message id" not in capfd.readouterr().err
