"""The language server's state and behaviour; ``server.py`` only routes LSP messages here.

One session per server process: the settings, the documents, and how results reach the client. The audits
themselves run in the audit service (``k3lsp.core.service``: text, units, witnesses, scope, targets, the run): the
session is one of its front ends, handing it a document and turning its events into diagnostics, messages and
progress. A result is shown with the units of the split its audit started from (the whole file is not sent to the
splitter again while its text is the same). Results reach the client in exactly one way per client:
pushed (``publishDiagnostics``), or pulled (``textDocument/diagnostic``) when the client can both pull and be
told to pull again (``workspace/diagnostic/refresh``). Neovim 0.11 pulls only on open and on change, never
after a save, so without refresh support an audit's results would never reach it.

Nothing here waits on a daemon before it answers the editor: an opened file shows what the cache knows at
once (the daemons are contacted in the background), ``k3lsp.status`` answers from what is known, and splitting
a file runs in a process of its own (a 1 MB file must not stop hovers elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from k3lsp.core import options, scope, service, tasks
from k3lsp.core.client import DaemonClient, DaemonError
from k3lsp.core.connection import DaemonState, DaemonUnavailable, TransportFactory
from k3lsp.core.pool import Pool
from k3lsp.core.service import AuditService, Event, FileDone, Job, LookedUp, Prepared, Progress, UnitDone
from k3lsp.findings import model as findings
from k3lsp.findings import suppress
from k3lsp.lsp import actions, convert, progress, workspace
from k3lsp.lsp.documents import Document, FileReport, Silenced, View, alert_notices, notices, present
from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit
from k3lsp.units.splitting import Splitter
from k3lsp.wire import sanitize
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import ConnState, Priority
from k3lsp.witnesses.analyze import available

log = logging.getLogger(__name__)

STATUS_NOTIFICATION = "k3lsp/status"
SECTION = "k3lsp"
READY_TIMEOUT = 10.0  # a client that never sends `initialized` still gets audits, with the settings it gave


def supports_pull(caps: lsp.ClientCapabilities) -> bool:
    """Pull only when the client can also be asked to pull again after a background audit."""
    pull = caps.text_document is not None and caps.text_document.diagnostic is not None
    diagnostics = caps.workspace.diagnostics if caps.workspace is not None else None
    return pull and diagnostics is not None and bool(diagnostics.refresh_support)


def _supports_related(caps: lsp.ClientCapabilities) -> bool:
    publish = caps.text_document.publish_diagnostics if caps.text_document else None
    return bool(publish and publish.related_information)


def hover_style(caps: lsp.ClientCapabilities) -> findings.HoverStyle:
    """The client's preferred hover format (its first known ``contentFormat``; Markdown when it names none),
    and whether it shows the diagnostic under the pointer itself: the experimental client capability
    ``{"k3lsp": {"hoverShowsDiagnostics": true}}``, which the VS Code extension declares."""
    hover = caps.text_document.hover if caps.text_document else None
    offered = (hover.content_format if hover else None) or []
    formats = [f for f in offered if f in (lsp.MarkupKind.Markdown, lsp.MarkupKind.PlainText)]
    markdown = not formats or formats[0] == lsp.MarkupKind.Markdown
    experimental = caps.experimental if isinstance(caps.experimental, dict) else {}
    ours = experimental.get("k3lsp")
    shows = isinstance(ours, dict) and ours.get("hoverShowsDiagnostics") is True
    return findings.HoverStyle(markdown=markdown, shows_diagnostic=shows)


def witness_status(configured: tuple[str, ...]) -> dict[str, str]:
    """Each known witness: its version, or why it is missing; those not in the ``witnesses`` setting say so."""
    out = {}
    for name, found in available().items():
        state = found if isinstance(found, str) else found.version
        out[name] = state if name in configured else f"off ({state})"
    return out


class Session:
    def __init__(
        self, ls: LanguageServer, cache: ResultCache | None = None, transport: TransportFactory = DaemonClient
    ):
        self.ls = ls
        self.options = options.Options()
        self.cache = cache or ResultCache()
        self._refresher = progress.Paced(lambda: ls.workspace_diagnostic_refresh(None), progress.REFRESH_SECONDS)
        self._status = progress.Paced(self._send_status, progress.STATUS_SECONDS)
        self.pool = Pool(
            self.options, self.cache, transport=transport, on_state=self._state_changed, on_tool=self._tool_used
        )
        self.docs: dict[str, Document] = {}
        self.pull = False
        self.related = True
        self.progress = False
        self.configurable = False
        self.asks = False  # the client answers window/showMessageRequest (it declares window.showMessage)
        self.hover_style = findings.HoverStyle()
        self.baseline: suppress.Baseline | None = None
        self.root: Path | None = None
        self._tasks: set[asyncio.Task] = set()
        self._shown_state = ConnState.DISCONNECTED
        self._told_down = False  # the user was told the daemons are unusable, and not yet that they are back
        self._sent_state: dict | None = None
        self._initial = options.Options()  # from initializationOptions: what a client without a settings section gets
        self._settings_read: asyncio.Future | None = None
        self._pending_errors: list[str] = []  # initializationOptions' settings problems
        self._read_errors: list[str] = []  # the last workspace/configuration read's settings problems
        self._told: set[str] = set()  # the settings problems in force: each is shown once, not at every read
        self._told_witness: set[str] = set()  # a witness that cannot run is said once per reason
        self._ready = asyncio.Event()  # set once `initialized` has applied the settings
        self._closing = False  # set by `shutdown`: no new audit may reopen the daemon connection
        self._splitter = Splitter()
        self.service = AuditService(self.pool, split=self._split)
        self.splits = self.service.splits

    # --- settings ----------------------------------------------------------------------------------------

    def initialize(self, params: lsp.InitializeParams) -> None:
        caps = params.capabilities
        self.pull = supports_pull(caps)
        self.related = _supports_related(caps)
        self.progress = bool(caps.window and caps.window.work_done_progress)
        self.configurable = bool(caps.workspace and caps.workspace.configuration)
        self.asks = bool(caps.window and caps.window.show_message)
        self.hover_style = hover_style(caps)
        root = self.ls.workspace.root_path
        self.root = Path(root) if root else None
        self.options, self._pending_errors = options.parse(params.initialization_options)
        self._initial = self.options

    async def initialized(self) -> None:
        self.spawn(asyncio.to_thread(self.splits.open), "opening the split store")
        await self.pool.reconfigure(self.options)
        await self.refresh_settings()
        self._tell_settings()  # without a read (no workspace/configuration, or it failed) the initial problems
        self.load_baseline()
        self._ready.set()
        # The splitter's process now, not at the first file opened (half a second to start and load its parsers);
        # once the settings are read: starting it before slowed that read, which every first audit waits for.
        self._splitter.start(self.options.kernel_macros)
        self._state_changed(self.pool.state)  # the client learns the state now, not at the first audit

    async def ready(self) -> None:
        """Wait (bounded) until the settings are applied, so no audit goes to the default endpoint by mistake."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), READY_TIMEOUT)

    async def refresh_settings(self) -> None:
        """Re-read the ``k3lsp`` section (workspace/configuration); one read at a time.

        A change notified while a read is on its way needs no second read: the client answers a request in
        the order it sent its messages, so that answer already has the change (VS Code announces its settings
        with a didChangeConfiguration right after ``initialized``, while ``initialized`` reads them).
        """
        if not self.configurable:
            return
        if self._settings_read is None:
            self._settings_read = asyncio.ensure_future(self._read_settings())
            self._settings_read.add_done_callback(lambda _: setattr(self, "_settings_read", None))
        await asyncio.shield(self._settings_read)

    async def _read_settings(self) -> None:
        """The section is the whole of the settings: a key removed from it gets its default back. A client
        without a ``k3lsp`` section (null) keeps what initializationOptions said, and every client keeps its
        connection settings (``options.CONNECTION``): a workspace's value of those is ignored, and said so once."""
        try:
            (raw,) = await self.ls.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section=SECTION)])
            )
        except Exception as exc:  # a client that does not answer is not a reason to stop
            log.warning("workspace/configuration failed: %s", exc)
            return
        self.options, self._read_errors = (
            options.parse_workspace(raw, self._initial) if raw is not None else (self._initial, [])
        )
        self._tell_settings()
        await self.pool.reconfigure(self.options)
        await self.republish_all()

    def _tell_settings(self) -> None:
        """One message for the settings problems not yet told: initializationOptions' and the last read's
        together, the same problem in both named once (VS Code sends the same keys both ways); a problem fixed and
        made again is told again."""
        problems = list(dict.fromkeys([*self._pending_errors, *self._read_errors]))
        untold = [p for p in problems if p not in self._told]
        if untold:
            self.message(options.summary(untold), lsp.MessageType.Error)
        self._told = set(problems)

    def load_baseline(self) -> None:
        if self.root is None:
            return
        self.baseline = suppress.Baseline.load(self.root)
        if self.baseline.error:
            self.message(self.baseline.error, lsp.MessageType.Error)

    def view(self) -> View:
        return View(self.options, self.baseline, self.related)

    # --- talking to the client ---------------------------------------------------------------------------

    def message(self, text: str, kind: lsp.MessageType = lsp.MessageType.Info) -> None:
        """window/showMessage; the text may quote the model or the daemon, so it is sanitised here."""
        self.ls.window_show_message(lsp.ShowMessageParams(type=kind, message=sanitize.text(text)))

    async def ask(self, text: str, choices: list[str]) -> str | None:
        """window/showMessageRequest: the title of the choice the person clicked (None: dismissed, or no answer)."""
        params = lsp.ShowMessageRequestParams(
            type=lsp.MessageType.Warning,
            message=sanitize.text(text),
            actions=[lsp.MessageActionItem(title=c) for c in choices],
        )
        try:
            answer = await self.ls.window_show_message_request_async(params)
        except Exception as exc:  # a client that fails the request has not chosen
            log.warning("window/showMessageRequest failed: %s", exc)
            return None
        return answer.title if answer is not None else None

    def silenced(self) -> dict[str, int]:
        """How many findings of the open documents are silenced: by comments in the source, by the baseline, by
        the model, hidden in code the kconfig does not build."""
        return asdict(sum((doc.silenced for doc in self.docs.values()), Silenced()))

    def _state_changed(self, state: DaemonState) -> None:
        """The status notification for the VS Code and Neovim status views (with how many findings of the open
        documents are silenced), and, for every client, one message when the daemons become unusable and one
        when they are back."""
        sent = self._sent_state
        if sent is None or (sent["state"], sent["message"]) != (state.state, state.message):
            self._status.send()  # a new state is news at once; queue counts only every STATUS_SECONDS
        else:
            self._status.request()
        if state.state == self._shown_state or state.state in (ConnState.CONNECTING, ConnState.DISCONNECTED):
            return
        if state.state.failed:
            self.message(
                f"{state.message}. Showing cached findings; retrying on the next audit.", lsp.MessageType.Warning
            )
            self._told_down = True
        elif state.state is ConnState.CONNECTED and self._told_down:  # back, perhaps after a load
            self.message(f"k3 audit backend is back: {state.message}")
            self._told_down = False
        self._shown_state = state.state

    def _send_status(self) -> None:
        payload = asdict(self.pool.state) | self.silenced() | {"scope": self.scope_note()}
        if payload != self._sent_state:  # only changes are news
            self._sent_state = payload
            self.ls.protocol.notify(STATUS_NOTIFICATION, payload)

    def _tool_used(self, request: dict, ok: bool, answer: str) -> None:
        """Log every workspace read the model asked for, and every refusal: the user can audit the auditor."""
        args = ", ".join(f"{k}={v!r}" for k, v in request["args"].items())
        outcome = f"answered ({len(answer)} characters)" if ok else f"refused: {answer}"
        kind = lsp.MessageType.Log if ok else lsp.MessageType.Warning
        self.ls.window_log_message(
            lsp.LogMessageParams(type=kind, message=sanitize.line(f"model tool {request['tool']}({args}) {outcome}"))
        )

    def publish(self, doc: Document) -> None:
        """Tell the client about the document's findings, once per change (an unchanged list is not news)."""
        if doc.published == doc.result_id:
            return
        doc.published = doc.result_id
        if self.pull:
            self._refresher.request()
        else:
            self.ls.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(uri=doc.uri, diagnostics=doc.diagnostics())
            )

    async def units(self, doc: Document, text: str) -> tuple[Unit, ...]:
        """The units of the document's text: those of its last split while the text and ``kernelMacros`` are the
        same (an audit's own split, kept for every result it shows), else a new split in the splitter's own process
        (``k3lsp.units.splitting``: never on the event loop, nor in a thread of this process, whose parse would hold
        the GIL)."""
        asked = (text, self.options.kernel_macros)
        if doc.split is None or doc.split[0] != asked:
            doc.split = (asked, await self._split(*asked))
        return doc.split[1]

    def keep_split(self, doc: Document) -> None:
        """Keep the split of a document the editor opened for its next opening (``k3lsp.core.splits``; the
        service keeps those of the files an audit found something in). In a thread, once its findings are shown
        (encoding a 0.9 MB file's units takes tens of milliseconds)."""
        if doc.split is not None:
            (text, macros), split = doc.split
            self.spawn(asyncio.to_thread(self.splits.put, text, macros, split), f"keeping the split of {doc.relpath}")

    async def _split(self, text: str, macros: Macros) -> tuple[Unit, ...]:
        """A text's units: as kept from an earlier split of the same text (``k3lsp.core.splits``: no wait for the
        splitter), else from the splitter."""
        kept = await asyncio.to_thread(self.splits.get, text, macros)
        return kept if kept is not None else await self._splitter.split(text, macros)

    async def republish(self, doc: Document) -> None:
        """Derive what is shown from the stored results for the document's current text, and send it."""
        text = await self.text(doc)
        if text is None:
            return
        split = await self.units(doc, text)
        shown, silenced = present(doc.uri, text, split, doc.results, self.view(), doc.states)
        alerted, quiet = alert_notices(text, split, doc.results, doc.alerts, self.view(), doc.states)
        doc.silenced = silenced + quiet
        o = self.options
        with_scope = o.scope == scope.CHANGED  # the document's lines the work tree changed since the base, or None
        doc.changed = (
            await asyncio.to_thread(scope.changed, doc.path, text, o.base_ref, o.max_file_bytes) if with_scope else None
        )
        if doc.changed is not None:  # scope changed: only what lies on lines the work tree changed
            changed = doc.changed
            shown = [s for s in shown if changed.meets(s.diagnostic.range.start.line, s.diagnostic.range.end.line)]
            alerted = [a for a in alerted if changed.meets(a.diagnostic.range.start.line, a.diagnostic.range.end.line)]
        doc.show(shown, notices(split, doc.refusals) + alerted)
        self.publish(doc)
        self._state_changed(self.pool.state)  # the silenced counts in the status may have changed

    def scope_note(self) -> str:
        return scope.describe(self.options.scope, [d.changed.base for d in self.docs.values() if d.changed])

    async def republish_all(self) -> None:
        for doc in list(self.docs.values()):
            await self.republish(doc)

    def progress_bar(self, title: str, total: int):
        return progress.bar(self.ls, self.progress, title, total)

    # --- documents ---------------------------------------------------------------------------------------

    def document(self, uri: str) -> Document:
        doc = self.docs.get(uri)
        if doc is None:
            path = Path(to_fs_path(uri) or uri)  # untitled:Untitled-1 stays a relative, rootless path
            inside = self.root is not None and path.is_relative_to(self.root)
            root = self.root if inside else None  # outside the workspace: no tools (its folder may be ~)
            relpath = path.relative_to(root).as_posix() if root is not None else path.name
            doc = self.docs[uri] = Document(uri, path, root, relpath)
        return doc

    def editor_text(self, doc: Document) -> str | None:
        """The editor's text of an open document; None when the editor has not opened it."""
        opened = self.ls.workspace.text_documents.get(doc.uri)
        return opened.source if opened is not None else None

    async def text(self, doc: Document) -> str | None:
        """The editor's text of an open document, else the file on disk (read off the event loop); None (logged)
        when unreadable. A file that is not UTF-8 (Latin-1 sources) is read as the sandbox reads it."""
        text = self.editor_text(doc)
        if text is not None:
            return text
        try:
            return await asyncio.to_thread(doc.path.read_text, encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("cannot read %s: %s", doc.uri, exc)
            return None

    def changed(self, uri: str, changes: list[Any]) -> None:
        doc = self.docs.get(uri)
        if doc is not None and doc.follow(changes):
            self.publish(doc)

    def closed(self, uri: str) -> None:
        """Forget a closed document (its results stay in the cache): settings changes re-read every kept one."""
        doc = self.docs.pop(uri, None)
        if doc is None:
            return
        self._state_changed(self.pool.state)  # its silenced findings leave the count
        if doc.task is not None:
            doc.task.cancel()
        if not self.pull:
            self.ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def hover(self, uri: str, position: lsp.Position) -> lsp.Hover | None:
        doc = self.docs.get(uri)
        hits = doc.at(position) if doc else []
        return convert.hover(hits[0].finding, hits[0].unit, self.hover_style, hits[0].unbuilt) if hits else None

    def code_actions(self, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        doc = self.docs.get(params.text_document.uri)
        text = self.editor_text(doc) if doc is not None else None
        if doc is None or not doc.shown or text is None:
            return None
        wanted = {d.data.get("fingerprint") for d in params.context.diagnostics if isinstance(d.data, dict)}
        rng = params.range
        hits = [s for s in doc.shown if s.fingerprint in wanted or s.contains(rng.start) or s.contains(rng.end)]
        if not hits:
            return None
        lines = text.split("\n")
        offered = [action for shown in hits for action in actions.for_finding(shown, doc.uri, lines)]
        return actions.only(offered, params.context.only) or None

    # --- audits ------------------------------------------------------------------------------------------

    def opened(self, uri: str) -> None:
        """A document was opened: audit it (trigger ``open``), else show what the cache already knows for it."""
        if self.options.audits_on_open():
            self.audit(uri)
            return
        doc = self.document(uri)
        if not self._closing and (doc.task is None or doc.task.done()):
            doc.task = self.spawn(self._show_cached(doc), f"showing the cached findings of {doc.relpath}")

    async def _show_cached(self, doc: Document) -> None:
        """Findings from earlier audits (another session, before a restart) without a save: a cache lookup only,
        at once, under what is known of the daemons; they are contacted in the background meanwhile."""
        await self.ready()

        async def told(event: Event) -> None:
            if isinstance(event, Prepared):
                await self.prepared(doc, event)
            elif isinstance(event, UnitDone):
                doc.record(event.result.unit.key, event.result.findings, event.result.refusal)

        outcome = await self.service.audit([self.audited(doc)], told, Job(baseline=self.baseline, cached_only=True))
        if not any(f.error for f in outcome.files.values()):
            await self.republish(doc)
            self.keep_split(doc)
        if not self._closing:
            await self.pool.reach()

    def audited(self, doc: Document, line: int | None = None) -> service.Document:
        """The document as the audit service takes it: the editor's text when it is open (else the file's), and
        with ``line`` only the unit there."""
        at = None if line is None else frozenset({line})
        return service.Document(doc.path, doc.root, doc.relpath, text=self.editor_text(doc), units_at=at)

    async def prepared(self, doc: Document, ready: Prepared) -> None:
        """What the audit service prepared for a document: its split kept, the splitter's fallback and the witnesses'
        problems said (each once), their alerts shown at once, whatever the daemons' state (the model's triage of
        them comes with its audit)."""
        doc.split = ((ready.text, self.options.kernel_macros), ready.units)
        doc.states = {u.key: s for u, s in zip(ready.units, ready.states or (), strict=False)}
        if ready.note is not None:
            self.message(f"{doc.relpath}: {ready.note}", lsp.MessageType.Warning)
        for note in ready.notes():
            if note not in self._told_witness:  # once: a hostile include repeats at each save
                self._told_witness.add(note)
                self.message(note, lsp.MessageType.Warning)
        doc.alerts = ready.witnessed.alerts if ready.witnessed is not None else []
        if ready.witnessed is not None:
            await self.republish(doc)

    def spawn(self, coro: Any, what: str) -> asyncio.Task:
        """A task the session owns: cancelled at shutdown, its failures logged as one line (``k3lsp.core.tasks``)."""
        task = tasks.background(coro, what)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def audit(self, uri: str, *, priority: Priority = Priority.INTERACTIVE, line: int | None = None) -> asyncio.Future:
        """Start auditing a document (or, with ``line``, re-audit the unit there); a newer audit cancels the older.

        After shutdown the answer is a finished refusal: a new audit would reconnect the closed client.
        """
        if self._closing:
            refused = asyncio.get_running_loop().create_future()
            refused.set_result(FileReport(error=workspace.SHUTTING_DOWN))
            return refused
        doc = self.document(uri)
        if doc.task is not None and not doc.task.done():
            doc.task.cancel()
        doc.task = self.spawn(self._audit(doc, priority, line), f"the audit of {doc.relpath}")
        return doc.task

    async def audit_and_wait(
        self, uri: str, *, priority: Priority = Priority.INTERACTIVE, line: int | None = None
    ) -> FileReport:
        """Audit and wait for the report; a newer audit of the same document superseding it is not an error."""
        task = self.audit(uri, priority=priority, line=line)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # we were cancelled ourselves
            return FileReport(cancelled=True)

    async def _audit(self, doc: Document, priority: Priority, line: int | None) -> FileReport:
        await self.ready()
        forced = line is not None
        job = Job(priority, force=forced, fresh=forced, baseline=self.baseline)
        asked = self.audited(doc, line)
        async with contextlib.AsyncExitStack() as stack:
            report: progress.Report | None = None  # progress only for real work: a no-op save stays one message
            audited = misses = 0
            split: tuple[Unit, ...] = ()

            async def told(event: Event) -> None:
                nonlocal report, audited, misses, split
                if isinstance(event, Prepared):
                    split = event.units
                    await self.prepared(doc, event)
                elif isinstance(event, LookedUp) and event.misses:
                    await self.republish(doc)  # the cached part now, the rest as it arrives
                    misses = event.misses
                    report = await stack.enter_async_context(self.progress_bar(f"k3 audit {doc.relpath}", misses))
                elif isinstance(event, UnitDone):
                    r = event.result
                    doc.record(r.unit.key, r.findings, r.refusal)
                    if not r.cached and report is not None:
                        audited += 1
                        report(audited, f"{audited}/{misses} units ({r.unit.name})")
                        await self.republish(doc)
                elif isinstance(event, Progress) and event.note and report is not None:
                    report(audited, event.note)
                elif isinstance(event, FileDone) and event.outcome.error is not None:
                    self.message(event.outcome.error, lsp.MessageType.Warning)

            outcome = await self.service.audit([asked], told, job)
        file, summary = outcome.files[asked], outcome.summary
        if file.error is not None:
            return FileReport(error=file.error)
        if line is None and summary.complete:
            doc.keep_results_for(split)
        await self.republish(doc)
        self.keep_split(doc)
        if summary.incomplete:
            names = ", ".join(f"{r.unit.name} ({r.cut_short})" for r in summary.incomplete)
            self.message(
                f"k3 audit of {doc.relpath} was cut short for {names}: findings there may be missing. Not cached: "
                "audited again on the next save.",
                lsp.MessageType.Warning,
            )
        return FileReport(
            units=file.units,
            done=file.done,
            findings=len(doc.shown),
            error=summary.unavailable if summary.left else None,
            incomplete=file.incomplete,
        )

    def open_paths(self) -> set[Path]:
        """The files open in the editor."""
        return {Path(to_fs_path(uri) or uri) for uri in self.ls.workspace.text_documents}

    @property
    def closing(self) -> bool:
        """Shutdown has begun: nothing new may start."""
        return self._closing

    async def explain(self, uri: str, fingerprint: str) -> str | None:
        doc = self.docs.get(uri)
        shown = doc.by_fingerprint(fingerprint) if doc else None
        if doc is None or shown is None:
            self.message("That finding is no longer shown; save to re-audit.", lsp.MessageType.Warning)
            return None
        await self.ready()
        parts: list[str] = []
        # The reasoning came with the finding: it leads the explanation, and survives a failed explain.
        why = f"Why it was flagged: {shown.finding.reasoning}\n\n" if shown.finding.reasoning else ""
        explained = self.service.explain(self.audited(doc), shown.unit, shown.finding.to_dict())
        async with self.progress_bar(f"Explaining CWE-{shown.finding.cwe}", 0) as report:
            try:
                async for piece in explained:
                    parts.append(piece)
                    report(0, f"{len(''.join(parts))} characters")
            except (DaemonUnavailable, DaemonError) as exc:
                self.message(f"{why}Cannot explain the finding: {exc}", lsp.MessageType.Error)
                return None
        answer = why + (sanitize.text("".join(parts)).strip() or "(the model gave no explanation)")
        self.message(f"{shown.finding.title} (CWE-{shown.finding.cwe})\n\n{answer}")
        return answer

    async def suppress_in_baseline(self, uri: str, fingerprint: str) -> bool:
        doc = self.docs.get(uri)
        shown = doc.by_fingerprint(fingerprint) if doc else None
        if doc is None or shown is None or self.root is None:
            self.message(
                "Cannot add to the baseline: no workspace folder or the finding is gone.", lsp.MessageType.Error
            )
            return False
        self.load_baseline()
        assert self.baseline is not None
        try:
            self.baseline.add(fingerprint, shown.finding.cwe, shown.finding.title, doc.relpath)
        except suppress.BaselineError as exc:
            self.message(str(exc), lsp.MessageType.Error)
            return False
        await self.republish_all()
        return True

    async def status(self) -> dict:
        """What is known now (``Pool.status`` waits for no hello)."""
        out = await self.pool.status()
        out["documents"] = len(self.docs)
        out["silenced"] = self.silenced()
        out["diagnostics"] = "pull" if self.pull else "push"
        out["cache"] = self.cache.stats()
        out["splits"] = self.splits.stats()
        out["witnesses"] = witness_status(self.options.witnesses)
        out["settings"] = options.effective(self.options)  # what the editor's settings became, by key
        out["scope"] = self.scope_note()
        return out

    async def shutdown(self) -> None:
        """Cancel our own tasks before pygls tears down (pygls #606 crashes on running work otherwise);
        cancelling an audit sends its ``cancel`` to the daemon before the socket closes."""
        self._closing = True
        self._refresher.cancel()
        self._status.cancel()
        await tasks.cancel(*self._tasks)
        await self.pool.close()
        self._splitter.close()
        self.splits.close()
