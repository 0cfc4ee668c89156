"""The pygls language server: handlers only, each delegating to ``k3lsp.lsp.session`` (jedi-language-server style).

Diagnostics are pushed or pulled, never both (Neovim shows both copies otherwise): the pull handler is
registered during ``initialize`` only for clients that can pull and refresh (see ``session.supports_pull``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

from k3lsp import __version__
from k3lsp.core.client import DaemonClient
from k3lsp.core.connection import TransportFactory
from k3lsp.lsp import actions, variants, workspace
from k3lsp.lsp.session import Session
from k3lsp.wire import ending, sanitize


class Utf16Protocol(LanguageServerProtocol):
    """Always negotiate UTF-16 columns, the only encoding k3lsp computes (``k3lsp.findings.spans.utf16_len``).

    pygls 2.1 picks the client's first offered encoding, and Neovim offers utf-8 first: the ranges we send
    and the incremental edits pygls applies would then be counted in different units on non-ASCII lines.
    Hiding the client's list before pygls chooses makes it fall back to UTF-16, which every client supports.
    """

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams):  # type: ignore[override]
        if params.capabilities.general is not None:
            params.capabilities.general.position_encodings = None
        return (yield from super().lsp_initialize(params))

    def _execute_handler(
        self,
        msg_id: Any,
        handler: Callable[..., Any],
        callback: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        """A command's coroutine runs as a step of pygls's ``workspace/executeCommand`` generator, under an id of
        its own: ``$/cancelRequest`` cancels the request's answer but not the command (a cancelled workspace
        audit went on). Cancelling the answer now cancels the step that is running."""
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        answer = getattr(callback, "keywords", {}).get("result_future")  # functools.partial(_run_generator, ...)
        step = self._request_futures.get(msg_id)
        if answer is not None and step is not None and step is not answer:
            answer.add_done_callback(lambda done: step.cancel() if done.cancelled() else None)


def create(transport: TransportFactory = DaemonClient) -> LanguageServer:
    """A language server with its session; ``transport`` is the socket to each daemon of the ``endpoint``
    setting (the LSP logic tests give a fake daemon: everything else is the real audit core)."""
    server = LanguageServer(
        "k3lsp",
        __version__,
        text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
        protocol_cls=Utf16Protocol,
    )
    session = Session(server, transport=transport)

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: LanguageServer, params: lsp.InitializeParams) -> None:
        session.initialize(params)
        if session.pull:
            options = lsp.DiagnosticOptions(
                identifier="k3-audit", inter_file_dependencies=False, workspace_diagnostics=False
            )
            ls.feature(lsp.TEXT_DOCUMENT_DIAGNOSTIC, options)(pull_diagnostics)

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: LanguageServer, params: lsp.InitializedParams) -> None:
        await session.initialized()

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: LanguageServer, params: lsp.DidChangeConfigurationParams) -> None:
        await session.refresh_settings()

    @server.feature(lsp.SHUTDOWN)
    async def shutdown(ls: LanguageServer, params: None) -> None:
        await session.shutdown()

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
        session.opened(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=False))
    def did_save(ls: LanguageServer, params: lsp.DidSaveTextDocumentParams) -> None:
        if session.options.audits_on_save():
            session.audit(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
        session.changed(params.text_document.uri, list(params.content_changes))

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
        session.closed(params.text_document.uri)

    def pull_diagnostics(ls: LanguageServer, params: lsp.DocumentDiagnosticParams) -> lsp.DocumentDiagnosticReport:
        doc = session.document(params.text_document.uri)
        result_id = str(doc.result_id)
        if params.previous_result_id == result_id:
            return lsp.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        return lsp.RelatedFullDocumentDiagnosticReport(items=doc.diagnostics(), result_id=result_id)

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: LanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
        return session.hover(params.text_document.uri, params.position)

    quick_fixes = lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix])

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, quick_fixes)
    def code_action(ls: LanguageServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        return session.code_actions(params)

    @server.command("k3lsp.auditFile")
    async def audit_file(ls: LanguageServer, uri: str) -> dict:
        return asdict(await session.audit_and_wait(uri))

    @server.command("k3lsp.auditWorkspace")
    async def audit_workspace(ls: LanguageServer, *scope: str) -> dict:  # no argument: asked when large
        return asdict(await workspace.audit(session, scope[0] if scope else None))

    @server.command("k3lsp.status")
    async def status(ls: LanguageServer) -> dict:
        return await session.status()

    @server.command(actions.EXPLAIN)
    async def explain(ls: LanguageServer, uri: str, fingerprint: str) -> str | None:
        return await session.explain(uri, fingerprint)

    @server.command(actions.SUPPRESS_IN_BASELINE)
    async def suppress_in_baseline(ls: LanguageServer, uri: str, fingerprint: str) -> bool:
        return await session.suppress_in_baseline(uri, fingerprint)

    @server.command(actions.FIND_VARIANTS)
    async def find_variants(ls: LanguageServer, uri: str, fingerprint: str) -> dict | None:
        return await variants.find(session, uri, fingerprint)

    @server.command(actions.REAUDIT_FUNCTION)
    async def reaudit_function(ls: LanguageServer, uri: str, line: int) -> dict:
        return asdict(await session.audit_and_wait(uri, line=line))

    return server


def _not_a_late_cancel(record: logging.LogRecord) -> bool:
    """Editors cancel hovers and code actions that were already answered; pygls warns about each such cancel,
    and VS Code shows every stderr line of the server as an error in its output channel."""
    return not record.getMessage().startswith("Cancel notification for unknown message id")


TTY_NOTE = (
    "k3lsp: the k3 audit language server, waiting for an editor to speak LSP on stdin/stdout; for the command "
    "line see `k3lsp --help` (e.g. `k3lsp audit PATH`); Ctrl-D ends it"
)


def serve_stdio(transport: TransportFactory = DaemonClient) -> None:
    """Run the server on stdin/stdout until the client exits it; logs go to stderr (stdout is the protocol).

    Run bare in a terminal it would wait in silence for an LSP message nobody types: a terminal on stdin gets a
    note on stderr. An editor's pipe gets nothing (VS Code shows every stderr line of a server as an error)."""
    if sys.stdin.isatty():
        print(TTY_NOTE, file=sys.stderr, flush=True)
    sanitize.log_to_stderr("k3lsp %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message in full at INFO
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_not_a_late_cancel)
    create(transport).start_io(stdout=ending.ProtocolStdout(sys.stdout.fileno()))  # no editor left: end at once
