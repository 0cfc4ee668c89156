"""Drive a real `k3lsp` server process over stdio with pytest-lsp's client, as an editor would.

`editor(...)` starts `python -m k3lsp.cli` with its own cache directory, initializes it with a client
capability profile (VS Code pushes, a pull-capable profile pulls) and the settings given, and shuts it
down at the end. Every wait here is bounded: a server that misbehaves fails the test, never hangs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Union

import attrs
from lsprotocol import types as lsp
from pygls.uris import to_fs_path
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.support.fake_daemon import FakeScript

WAIT = 60.0  # seconds: an audit on the tiny model on 2 busy cores takes a few


def _tell_code_actions_from_commands(client: LanguageClient) -> None:
    """lsprotocol structures anything with a ``command`` key as a Command, so a CodeAction carrying a command
    (an object, where a Command's is a string) would lose its kind and diagnostics in these tests."""
    converter = client.protocol._converter

    def structure(obj: Any, _: type) -> lsp.Command | lsp.CodeAction:
        kind = lsp.Command if isinstance(obj.get("command"), str) else lsp.CodeAction
        return converter.structure(obj, kind)

    converter.register_structure_hook(Union[lsp.Command, lsp.CodeAction], structure)  # noqa: UP007 (its key)


def pull_capabilities() -> lsp.ClientCapabilities:
    """Neovim 0.11's profile plus diagnostic refresh: a client that pulls and can be told to pull again."""
    caps = client_capabilities("neovim@v0.11.0")
    workspace = attrs.evolve(
        caps.workspace, diagnostics=lsp.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    )
    return attrs.evolve(caps, workspace=workspace)


PROFILES: dict[str, Callable[[], lsp.ClientCapabilities]] = {
    "vscode": lambda: client_capabilities("visual-studio-code"),  # 1.65: push
    "neovim": lambda: client_capabilities("neovim@v0.11.0"),  # pulls, but cannot be asked to re-pull: push
    "pull": pull_capabilities,
    "emacs": lambda: client_capabilities("emacs@v29.1"),  # push; and no handler for k3lsp/status (as eglot)
}
WITHOUT_STATUS_VIEW = {"emacs"}  # profiles whose client ignores the k3lsp/status notification
LOST_EXCEPTIONS = ("exception was never retrieved", "Task was destroyed but it is pending")


class Editor:
    """A started client, the workspace it has open and the mode the server chose."""

    def __init__(self, client: LanguageClient, root: Path, pull: bool):
        self.client, self.root, self.pull = client, root, pull
        self.versions: dict[str, int] = {}
        self.texts: dict[str, str] = {}
        self.status_notes: list[dict] = []
        self.published: list[tuple[str, list[lsp.Diagnostic]]] = []  # every publishDiagnostics, in order
        self.configuration_reads = 0  # workspace/configuration requests the server made
        self.capabilities: lsp.ServerCapabilities | None = None  # what the server answered to `initialize`
        self.stderr: list[str] = []  # the server's stderr lines so far
        self.refreshes: list[float] = []  # when the server asked for workspace/diagnostic/refresh (loop time)

    def shown(self, kind: lsp.MessageType) -> list[str]:
        """The window/showMessage texts of one type, in order: what every client shows a person."""
        return [m.message for m in self.client.messages if m.type == kind]

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def open(self, name: str) -> str:
        uri, text = self.uri(name), (self.root / name).read_text()
        self.versions[uri], self.texts[uri] = 1, text
        item = lsp.TextDocumentItem(uri=uri, language_id="c", version=1, text=text)
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=item))
        return uri

    def change(self, uri: str, rng: lsp.Range, text: str) -> None:
        from tests.support.edits import apply_change

        self.versions[uri] += 1
        self.texts[uri] = apply_change(self.texts[uri], rng, text)
        doc = lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri])
        change = lsp.TextDocumentContentChangePartial(range=rng, text=text)
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(text_document=doc, content_changes=[change])
        )

    def save(self, uri: str) -> None:
        """Write the editor's text to disk and send didSave, as an editor's :write does."""
        Path(to_fs_path(uri)).write_text(self.texts[uri])
        doc = lsp.TextDocumentIdentifier(uri=uri)
        self.client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=doc))

    async def command(self, name: str, *args: Any, timeout: float = WAIT) -> Any:
        params = lsp.ExecuteCommandParams(command=name, arguments=list(args))
        return await asyncio.wait_for(self.client.workspace_execute_command_async(params), timeout)

    async def status(self) -> dict:
        return await self.command("k3lsp.status")

    async def diagnostics(self, uri: str) -> list[lsp.Diagnostic]:
        """What the client shows now: pushed ones, or a fresh pull."""
        if not self.pull:
            return list(self.client.diagnostics.get(uri, []))
        params = lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
        report = await asyncio.wait_for(self.client.text_document_diagnostic_async(params), WAIT)
        return list(report.items)

    async def wait_diagnostics(
        self, uri: str, until: Callable[[list[lsp.Diagnostic]], bool], timeout: float = WAIT
    ) -> list[lsp.Diagnostic]:
        """Poll what the client shows until `until` holds (bounded)."""

        async def poll() -> list[lsp.Diagnostic]:
            while True:
                current = await self.diagnostics(uri)
                if until(current):
                    return current
                await asyncio.sleep(0.05)

        return await asyncio.wait_for(poll(), timeout)

    async def wait_for_status(self, until: Callable[[dict], bool], timeout: float = WAIT) -> dict:
        """Poll the server's counters (k3lsp.status) until `until` holds."""

        async def poll() -> dict:
            while not until(counters := (await self.status())["counters"]):
                await asyncio.sleep(0.1)
            return counters

        return await asyncio.wait_for(poll(), timeout)

    def progress_token(self, title: str) -> Any:
        """The token of the work-done progress the server began under ``title``; None until it begins."""
        for token, values in self.client.progress_reports.items():
            if any(isinstance(v, lsp.WorkDoneProgressBegin) and v.title == title for v in values):
                return token
        return None

    async def wait_for(self, condition: Callable[[], Any], timeout: float = WAIT) -> Any:
        async def poll() -> Any:
            while not (value := condition()):
                await asyncio.sleep(0.05)
            return value

        return await asyncio.wait_for(poll(), timeout)


@contextlib.asynccontextmanager
async def editor(
    root: Path,
    *,
    profile: str = "vscode",
    settings: dict | None = None,
    cache_dir: Path,
    env: dict | None = None,
    capabilities: lsp.ClientCapabilities | None = None,
    configuration: dict | None = None,
    fake: FakeScript | None = None,
) -> AsyncIterator[Editor]:
    """``settings`` go as initializationOptions; ``configuration`` (when given) is the ``k3lsp`` section the client
    answers workspace/configuration with; ``capabilities`` replace the profile's; with ``fake``, the server's
    auditor is the fake answering from that script (tests/support/fake_daemon.py), not the daemons."""
    command = fake.server if fake is not None else [sys.executable, "-m", "k3lsp.cli"]
    config = ClientServerConfig(
        server_command=command,
        server_env=os.environ | {"K3LSP_CACHE_DIR": str(cache_dir)} | (fake.env if fake else {}) | (env or {}),
    )
    client = await asyncio.wait_for(config.start(), WAIT)
    _tell_code_actions_from_commands(client)
    clean = False
    ed = Editor(client, root, pull=profile == "pull")
    _record_stderr(client, ed.stderr)
    try:
        # pytest-lsp's own handlers keep only the last publish and answer configuration silently: count both.
        features = client.protocol.fm.features
        keep_last, answer = features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS], features[lsp.WORKSPACE_CONFIGURATION]

        def on_publish(params: lsp.PublishDiagnosticsParams) -> None:
            ed.published.append((params.uri, list(params.diagnostics)))
            keep_last(params)

        def on_configuration(params: lsp.ConfigurationParams) -> list:
            ed.configuration_reads += 1
            return answer(params)

        refresh = features[lsp.WORKSPACE_DIAGNOSTIC_REFRESH]

        def on_refresh(params: None) -> Any:
            ed.refreshes.append(asyncio.get_running_loop().time())
            return refresh(params)

        features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish
        features[lsp.WORKSPACE_CONFIGURATION] = on_configuration
        features[lsp.WORKSPACE_DIAGNOSTIC_REFRESH] = on_refresh

        if profile not in WITHOUT_STATUS_VIEW:

            @client.feature("k3lsp/status")
            def on_status(params: Any) -> None:
                # pygls hands unknown methods' params over as a namedtuple-like object
                ed.status_notes.append(params if isinstance(params, dict) else params._asdict())

        if configuration is not None:
            client.set_configuration(configuration, section="k3lsp")
        params = lsp.InitializeParams(
            capabilities=capabilities or PROFILES[profile](),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=settings or {},
        )
        ed.capabilities = (await asyncio.wait_for(client.initialize_session(params), WAIT)).capabilities
        yield ed
        await asyncio.wait_for(client.shutdown_session(), WAIT)  # the server must exit cleanly
        clean = True
    finally:
        if not clean:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.shutdown_session(), 10)
        server = client._server  # the process pytest-lsp started for us
        if server is not None and server.returncode is None:
            server.kill()
        await asyncio.wait_for(client.stop(), WAIT)
    lost = [line for line in ed.stderr if any(s in line for s in LOST_EXCEPTIONS)]
    assert not lost, f"the server lost the failure of a background task: {lost}"


def _record_stderr(client: LanguageClient, lines: list[str]) -> None:
    """Keep the server's stderr lines (and still forward them, as pytest-lsp does): a test can read them, and
    the end of every session checks that no background task's failure went unretrieved."""
    forwarder = client._stderr_forwarder
    server = client._server
    if forwarder is None or server is None or server.stderr is None:
        return
    forwarder.cancel()

    async def forward() -> None:
        while (line := await server.stderr.readline()) != b"":
            lines.append(line.decode(errors="replace"))
            sys.stderr.buffer.write(line)

    client._stderr_forwarder = asyncio.ensure_future(forward())
