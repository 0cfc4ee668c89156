"""The language server's state and behaviour; ``server.py`` only routes LSP messages here.

One session per server process: the settings, the auditor (daemon connections + cache), the documents,
the audit tasks and how results reach the client. Results reach it in exactly one way per client:
pushed (``publishDiagnostics``), or pulled (``textDocument/diagnostic``) when the client can both pull
and be told to pull again (``workspace/diagnostic/refresh``). Neovim 0.11 pulls only on open and on
change, never after a save, so without refresh support an audit's results would never reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from k3lsp import actions, findings, options, sanitize, suppress, units
from k3lsp.auditor import BackendState, BackendUnavailable, Lookup, Progress, UnitResult, describe
from k3lsp.cache import ResultCache
from k3lsp.client import BackendError
from k3lsp.documents import Document, Silenced, View, notices, present
from k3lsp.options import Options
from k3lsp.pool import Pool
from k3lsp.units import Unit

log = logging.getLogger(__name__)

STATUS_NOTIFICATION = "k3lsp/status"
SECTION = "k3lsp"
MAX_WORKSPACE_FILES = 10_000
READY_TIMEOUT = 10.0  # a client that never sends `initialized` still gets audits, with the settings it gave
SHUTTING_DOWN = "the server is shutting down"


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


class AuditService(Protocol):
    """What the session asks of its auditor: ``k3lsp.pool.Pool`` (the daemons of the ``endpoint`` setting) in
    production. Written down so that another auditor (the LSP logic tests' fake, which runs without a daemon)
    is held to the same methods, and ``tests/lsp/test_server_logic.py`` compares both with this."""

    @property
    def state(self) -> BackendState: ...

    async def reconfigure(self, options: Options) -> None: ...

    async def close(self) -> None: ...

    async def lookup(self, units: Sequence[Unit], *, priority: str = "interactive", force: bool = False) -> Lookup: ...

    def audit_uncached(
        self,
        root: Path | None,
        path: str,
        units: Sequence[Unit],
        *,
        priority: str = "interactive",
        fresh: bool = False,
        on_progress: Progress | None = None,
    ) -> AsyncIterator[UnitResult]: ...

    def explain(self, root: Path | None, path: str, unit: Unit, finding: dict) -> AsyncIterator[str]: ...

    async def status(self) -> dict: ...


class AuditorFactory(Protocol):
    """Builds the session's auditor from the settings and the cache; ``Pool`` itself is one."""

    def __call__(
        self,
        options: Options,
        cache: ResultCache,
        *,
        on_state: Callable[[BackendState], None] | None = None,
        on_tool: Callable[[dict, bool, str], None] | None = None,
    ) -> AuditService: ...


class Session:
    def __init__(self, ls: LanguageServer, cache: ResultCache | None = None, auditor: AuditorFactory = Pool):
        self.ls = ls
        self.options = options.Options()
        self.cache = cache or ResultCache()
        self.auditor: AuditService = auditor(
            self.options, self.cache, on_state=self._state_changed, on_tool=self._tool_used
        )
        self.docs: dict[str, Document] = {}
        self.pull = False
        self.related = True
        self.progress = False
        self.configurable = False
        self.hover_style = findings.HoverStyle()
        self.baseline: suppress.Baseline | None = None
        self.root: Path | None = None
        self._tasks: set[asyncio.Task] = set()
        self._shown_state = "disconnected"
        self._sent_state: dict | None = None
        self._initial = options.Options()  # from initializationOptions: what a client without a settings section gets
        self._settings_read: asyncio.Future | None = None
        self._pending_errors: list[str] = []
        self._told: set[str] = set()  # the settings errors of the last read: each is shown once, not at every read
        self._ready = asyncio.Event()  # set once `initialized` has applied the settings
        self._closing = False  # set by `shutdown`: no new audit may reopen the daemon connection

    # --- settings ----------------------------------------------------------------------------------------

    def initialize(self, params: lsp.InitializeParams) -> None:
        caps = params.capabilities
        self.pull = supports_pull(caps)
        self.related = _supports_related(caps)
        self.progress = bool(caps.window and caps.window.work_done_progress)
        self.configurable = bool(caps.workspace and caps.workspace.configuration)
        self.hover_style = hover_style(caps)
        root = self.ls.workspace.root_path
        self.root = Path(root) if root else None
        self.options, self._pending_errors = options.parse(params.initialization_options)
        self._initial = self.options

    async def initialized(self) -> None:
        await self.auditor.reconfigure(self.options)
        for error in self._pending_errors:
            self.message(error, lsp.MessageType.Error)
        await self.refresh_settings()
        self.load_baseline()
        self._ready.set()
        self._state_changed(self.auditor.state)  # the client learns the state now, not at the first audit

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
        self.options, errors = options.parse_workspace(raw, self._initial) if raw is not None else (self._initial, [])
        for error in errors:
            if error not in self._told:
                self.message(error, lsp.MessageType.Error)
        self._told = set(errors)
        await self.auditor.reconfigure(self.options)
        self.republish_all()

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

    def silenced(self) -> dict[str, int]:
        """How many findings of the open documents are silenced: by comments in the source, by the baseline."""
        return asdict(sum((doc.silenced for doc in self.docs.values()), Silenced()))

    def _state_changed(self, state: BackendState) -> None:
        payload = asdict(state) | self.silenced()
        if payload != self._sent_state:  # queue bookkeeping calls this often: only changes are news
            self._sent_state = payload
            self.ls.protocol.notify(STATUS_NOTIFICATION, payload)
        if state.state == self._shown_state:
            return
        if state.state in ("down", "unauthorized"):
            self.message(
                f"{state.message}. Showing cached findings; retrying on the next audit.", lsp.MessageType.Warning
            )
        elif state.state == "connected" and self._shown_state in ("down", "unauthorized"):
            self.message(f"k3 audit backend is back: {state.message}")
        if state.state not in ("connecting", "disconnected"):
            self._shown_state = state.state

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
            self.ls.workspace_diagnostic_refresh(None)
        else:
            self.ls.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(uri=doc.uri, diagnostics=doc.diagnostics())
            )

    def republish(self, doc: Document) -> None:
        """Derive what is shown from the stored results for the document's current text, and send it."""
        text = self.text(doc)
        if text is None:
            return
        split = units.split(text)
        shown, doc.silenced = present(doc.uri, text, split, doc.results, self.view())
        doc.show(shown, notices(split, doc.refusals))
        self.publish(doc)
        self._state_changed(self.auditor.state)  # the silenced counts in the status may have changed

    def republish_all(self) -> None:
        for doc in self.docs.values():
            self.republish(doc)

    @contextlib.asynccontextmanager
    async def progress_bar(self, title: str, total: int) -> AsyncIterator[Callable[[int, str], None]]:
        """Work-done progress (uuid tokens, forgotten after end: pygls #607); cancelling it cancels this task."""
        if not self.progress:
            yield lambda done, note: None
            return
        token, bar = str(uuid.uuid4()), self.ls.work_done_progress
        try:
            await bar.create_async(token)
        except Exception as exc:
            log.warning("the client refused a progress token: %s", exc)
            yield lambda done, note: None
            return
        task, loop = asyncio.current_task(), asyncio.get_running_loop()

        def on_cancel(future: Any) -> None:  # window/workDoneProgress/cancel cancels the pygls future
            if future.cancelled() and task is not None:
                loop.call_soon_threadsafe(task.cancel)

        bar.tokens[token].add_done_callback(on_cancel)
        start = lsp.WorkDoneProgressBegin(
            title=title, cancellable=True, percentage=0 if total else None, message=f"0/{total}" if total else None
        )
        bar.begin(token, start)

        def report(done: int, note: str) -> None:
            pct = int(100 * done / total) if total else None  # no total (explain): an indefinite bar
            bar.report(token, lsp.WorkDoneProgressReport(percentage=pct, message=note or f"{done}/{total}"))

        try:
            yield report
        finally:
            bar.end(token, lsp.WorkDoneProgressEnd())
            bar.tokens.pop(token, None)

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

    def text(self, doc: Document) -> str | None:
        """The editor's text of an open document, else the file on disk; None (logged) when unreadable."""
        try:
            try:
                return self.ls.workspace.get_text_document(doc.uri).source
            except UnicodeDecodeError:  # read from disk, not UTF-8 (Latin-1 sources): audit it as `tools` reads it
                return doc.path.read_text(encoding="utf-8", errors="replace")
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
        self._state_changed(self.auditor.state)  # its silenced findings leave the count
        if doc.task is not None:
            doc.task.cancel()
        if not self.pull:
            self.ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def hover(self, uri: str, position: lsp.Position) -> lsp.Hover | None:
        doc = self.docs.get(uri)
        hits = doc.at(position) if doc else []
        return findings.to_hover(hits[0].finding, hits[0].unit, self.hover_style) if hits else None

    def code_actions(self, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        doc = self.docs.get(params.text_document.uri)
        if doc is None or not doc.shown:
            return None
        wanted = {d.data.get("fingerprint") for d in params.context.diagnostics if isinstance(d.data, dict)}
        rng = params.range
        hits = [s for s in doc.shown if s.fingerprint in wanted or s.contains(rng.start) or s.contains(rng.end)]
        text = self.text(doc)
        if not hits or text is None:
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
            doc.task = self.spawn(self._show_cached(doc))

    async def _show_cached(self, doc: Document) -> None:
        """Findings from earlier audits (another session, before a restart) without a save: a cache lookup only."""
        await self.ready()
        text = self.text(doc)
        if text is None or len(text.encode("utf-8", "surrogatepass")) > self.options.max_file_bytes:
            return
        with contextlib.suppress(BackendUnavailable):  # never reached: no model id to look results up by
            for hit in (await self.auditor.lookup(units.split(text))).hits:
                doc.record(hit.unit.key, hit.findings, hit.refusal)
        self.republish(doc)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """A background task the session owns: cancelled at shutdown, its failures logged, never raised."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    def audit(self, uri: str, *, priority: str = "interactive", line: int | None = None) -> asyncio.Future:
        """Start auditing a document (or, with ``line``, re-audit the unit there); a newer audit cancels the older.

        After shutdown the answer is a finished refusal: a new audit would reconnect the closed client.
        """
        if self._closing:
            refused = asyncio.get_running_loop().create_future()
            refused.set_result({"units": 0, "error": SHUTTING_DOWN})
            return refused
        doc = self.document(uri)
        if doc.task is not None and not doc.task.done():
            doc.task.cancel()
        doc.task = self.spawn(self._audit(doc, priority, line))
        return doc.task

    async def audit_and_wait(self, uri: str, *, priority: str = "interactive", line: int | None = None) -> dict:
        """Audit and wait for the summary; a newer audit of the same document superseding it is not an error."""
        task = self.audit(uri, priority=priority, line=line)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # we were cancelled ourselves
            return {"units": 0, "cancelled": True}

    async def _audit(self, doc: Document, priority: str, line: int | None) -> dict:
        await self.ready()
        text = self.text(doc)
        if text is None:
            return {"units": 0, "error": f"cannot read {doc.relpath}"}
        if len(text.encode("utf-8", "surrogatepass")) > self.options.max_file_bytes:
            note = f"{doc.relpath} is larger than maxFileBytes ({self.options.max_file_bytes}); not audited"
            self.message(note, lsp.MessageType.Warning)
            return {"units": 0, "error": note}
        all_units = units.split(text)
        note = units.fallback_note(all_units)
        if note is not None:
            self.message(f"{doc.relpath}: {note}", lsp.MessageType.Warning)
        todo = [u for u in all_units if line is None or u.start_line <= line <= u.end_line]
        root = doc.root
        try:
            found = await self.auditor.lookup(todo, priority=priority, force=line is not None)
        except BackendUnavailable as exc:
            return {"units": len(todo), "done": 0, "findings": len(doc.shown), "error": str(exc)}
        for hit in found.hits:
            doc.record(hit.unit.key, hit.findings, hit.refusal)
        done, error = len(found.hits), str(found.down) if found.misses and found.down else None
        incomplete: list[str] = []
        if found.misses and error is None:  # progress only for real work: a no-op save stays one message
            self.republish(doc)  # the cached part now, the rest as it arrives
            done, error = await self._audit_misses(
                doc, root, found.misses, priority, done, incomplete, fresh=line is not None
            )
        if line is None and error is None:
            doc.keep_results_for(all_units)
        self.republish(doc)
        if incomplete:
            self.message(
                f"k3 audit of {doc.relpath} was cut short for {', '.join(incomplete)}: findings there may be "
                "missing. Not cached: audited again on the next save.",
                lsp.MessageType.Warning,
            )
        return {
            "units": len(todo),
            "done": done,
            "findings": len(doc.shown),
            "error": error,
            "incomplete": len(incomplete),
        }

    async def _audit_misses(
        self,
        doc: Document,
        root: Path | None,
        misses: list[units.Unit],
        priority: str,
        done: int,
        incomplete: list[str],
        *,
        fresh: bool = False,
    ) -> tuple[int, str | None]:
        """Audit what the cache did not have, with cancellable progress (``fresh``: a re-audit, which the
        daemon's result store does not answer); returns (units done, error) and adds each unit whose audit was
        cut short to ``incomplete``, as "name (reason)"."""
        audited = 0
        async with self.progress_bar(f"k3 audit {doc.relpath}", len(misses)) as report:

            def progress(unit: units.Unit, message: dict) -> None:  # the daemon's prefill and decode, per unit
                report(audited, describe(unit, message))

            try:
                results = self.auditor.audit_uncached(
                    root, doc.relpath, misses, priority=priority, fresh=fresh, on_progress=progress
                )
                async with contextlib.aclosing(results) as stream:
                    async for result in stream:
                        audited += 1
                        doc.record(result.unit.key, result.findings, result.refusal)
                        if result.cut_short is not None:
                            incomplete.append(f"{result.unit.name} ({result.cut_short})")
                        report(audited, f"{audited}/{len(misses)} units ({result.unit.name})")
                        self.republish(doc)
            except BackendUnavailable as exc:
                return done + audited, str(exc)
        return done + audited, None

    async def audit_workspace(self) -> dict:
        """All C files of the workspace at background priority, one file at a time (the daemon batches units)."""
        if self.root is None:
            return {"files": 0, "error": "no workspace folder is open"}
        files = list(options.admitted_files(self.root, self.root, self.options, MAX_WORKSPACE_FILES))
        async with self.progress_bar("k3 audit workspace", len(files)) as report:
            for i, path in enumerate(files, 1):
                if self._closing:  # shutdown cancelled the last file's audit: do not start the next
                    return {"files": i - 1, "error": SHUTTING_DOWN}
                doc = self.document(from_fs_path(str(path)) or path.as_uri())
                result = await self.audit_and_wait(doc.uri, priority="background")
                report(i, f"{i}/{len(files)} files ({doc.relpath})")
                if result.get("error") and self.auditor.state.state != "connected":
                    return {"files": i, "error": result["error"]}
        return {"files": len(files)}

    async def explain(self, uri: str, fingerprint: str) -> str | None:
        doc = self.docs.get(uri)
        shown = doc.by_fingerprint(fingerprint) if doc else None
        if doc is None or shown is None:
            self.message("That finding is no longer shown; save to re-audit.", lsp.MessageType.Warning)
            return None
        await self.ready()
        root = doc.root
        parts: list[str] = []
        # The reasoning came with the finding: it leads the explanation, and survives a failed explain.
        why = f"Why it was flagged: {shown.finding.reasoning}\n\n" if shown.finding.reasoning else ""
        async with self.progress_bar(f"Explaining CWE-{shown.finding.cwe}", 0) as report:
            try:
                async for piece in self.auditor.explain(root, doc.relpath, shown.unit, shown.finding.to_dict()):
                    parts.append(piece)
                    report(0, f"{len(''.join(parts))} characters")
            except (BackendUnavailable, BackendError) as exc:
                self.message(f"{why}Cannot explain the finding: {exc}", lsp.MessageType.Error)
                return None
        answer = why + (sanitize.text("".join(parts)).strip() or "(the model gave no explanation)")
        self.message(f"{shown.finding.title} (CWE-{shown.finding.cwe})\n\n{answer}")
        return answer

    def suppress_in_baseline(self, uri: str, fingerprint: str) -> bool:
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
        self.republish_all()
        return True

    async def status(self) -> dict:
        await self.ready()
        out = await self.auditor.status()
        out["documents"] = len(self.docs)
        out["silenced"] = self.silenced()
        out["diagnostics"] = "pull" if self.pull else "push"
        out["cache"] = self.cache.stats()
        return out

    async def shutdown(self) -> None:
        """Cancel our own tasks before pygls tears down (pygls #606 crashes on running work otherwise);
        cancelling an audit sends its ``cancel`` to the daemon before the socket closes."""
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.auditor.close()
