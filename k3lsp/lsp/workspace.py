"""``k3lsp.auditWorkspace``: every C file of the workspace at background priority, a kernel tree included.

The files come in the order a person wants them: the files open in the editor, then the rest by when they
last changed, newest first. ``maxWorkspaceFiles`` bounds how many (0: no bound); what a bound leaves out is
said in one message. The file list is walked off the event loop. A file's audit is an ordinary job of the
audit service (``k3lsp.core.service``) at background priority, witnesses included, a few files at once so the
daemons always have units to batch; the server keeps a document only for files with something to show (a finding,
a refusal or an analyzer's alert), so 50,000 files audited cost 50,000 cache rows and no more server memory than
their findings. An open file goes through the editor's own audit (its task, its text, its messages).

The session hands itself in as an :class:`Editor`: what this module needs of it, named here, so the session imports
this module and never the other way round.

Cancelling its progress in the editor (``window/workDoneProgress/cancel``) stops the work and answers the request
with what was done and ``cancelled``: the files are audited in a task of their own, which the progress cancels,
so the command's own task returns. (Cancelling the command's task instead would leave the request unanswered:
pygls runs a command as a step of a generator that lets the CancelledError escape.)
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lsprotocol import types as lsp
from pygls.uris import from_fs_path

from k3lsp.core import service
from k3lsp.core.options import Options, admitted_files
from k3lsp.core.reachability import Skipped
from k3lsp.core.service import AuditService, Event, Job, Prepared, UnitDone
from k3lsp.findings import suppress
from k3lsp.lsp import progress, workscope
from k3lsp.lsp.documents import Document, FileReport
from k3lsp.wire.protocol import Priority

SHUTTING_DOWN = "the server is shutting down"
FILES_AT_ONCE = 4  # files whose units are queued together: enough for the daemons to batch, few enough to stop


@dataclass(frozen=True)
class WorkspaceReport:
    """The answer of ``k3lsp.auditWorkspace``."""

    files: int = 0  # files audited (or looked up)
    error: str | None = None
    left_out: int = 0  # files beyond maxWorkspaceFiles, not audited
    cancelled: bool = False  # the editor cancelled its progress: ``files`` were done by then


class Editor(Protocol):
    """What the workspace audit needs of the language server's session (``k3lsp.lsp.session.Session``)."""

    root: Path | None
    options: Options
    baseline: suppress.Baseline | None
    service: AuditService
    docs: dict[str, Document]
    asks: bool  # the client answers window/showMessageRequest

    async def ask(self, text: str, choices: list[str]) -> str | None: ...

    @property
    def closing(self) -> bool: ...

    def message(self, text: str, kind: lsp.MessageType = lsp.MessageType.Info) -> None: ...

    def progress_bar(self, title: str, total: int) -> AbstractAsyncContextManager[progress.Report]: ...

    async def prepared(self, doc: Document, ready: Prepared) -> None: ...

    async def republish(self, doc: Document) -> None: ...

    def keep_split(self, doc: Document) -> None: ...

    async def audit_and_wait(self, uri: str, *, priority: Priority = Priority.INTERACTIVE) -> FileReport: ...

    def open_paths(self) -> set[Path]: ...


def ordered_files(
    root: Path, options: Options, open_paths: set[Path], built: Callable[[Path], int] = lambda _: 0
) -> list[Path]:
    """The admitted files of the workspace, open ones first, then (``built``: the kconfig's
    ``Reachability.file_rank``) the files it builds before those it does not, then by modification time, newest
    first."""

    def mtime(path: Path) -> float:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return 0.0

    files = list(admitted_files(root, root, options))
    return sorted(files, key=lambda p: (p not in open_paths, built(p), -mtime(p)))


def left_out_note(files: list[Path], root: Path, bound: int) -> str:
    """What ``maxWorkspaceFiles`` leaves out, by top-level folder, largest first."""
    folders: dict[str, int] = {}
    for path in files[bound:]:
        rel = path.relative_to(root).parts
        top = rel[0] if len(rel) > 1 else "."
        folders[top] = folders.get(top, 0) + 1
    biggest = ", ".join(f"{name}/ ({n})" for name, n in sorted(folders.items(), key=lambda kv: -kv[1])[:8])
    return (
        f"k3 workspace audit: {len(files) - bound:,} of {len(files):,} files left out by maxWorkspaceFiles "
        f"({bound:,}): {biggest}. Raise the setting, or set it to 0, to audit them."
    )


@dataclass
class _Tally:
    files: int = 0
    incomplete: int = 0  # units cut short, over every file
    stop: str | None = None  # why the audit stopped early: no daemon is usable
    skipped: Skipped | None = None  # with a kconfig: the units it does not build, left out (unbuilt: hide) or not


async def audit(editor: Editor, asked: str | None = None) -> WorkspaceReport:
    """Audit the workspace's files, those open in the editor first; ``asked``: the scope the command named
    (``k3lsp.lsp.workscope``), else the whole workspace, or what the person chooses when it is large."""
    root = editor.root
    if editor.closing:
        return WorkspaceReport(error=SHUTTING_DOWN)
    if root is None:
        return WorkspaceReport(error="no workspace folder is open")
    opened = editor.open_paths()
    kconfig = editor.options.kconfig
    built = functools.partial(editor.service.reachability.file_rank, kconfig=kconfig) if kconfig else (lambda _: 0)
    files = await asyncio.to_thread(ordered_files, root, editor.options, opened, built)
    chosen = workscope.parse(asked, root) if asked is not None else await _choose(editor, root, files, opened)
    if isinstance(chosen, str):
        return WorkspaceReport(error=chosen)
    if chosen is None:
        return WorkspaceReport(cancelled=True)
    files = await asyncio.to_thread(workscope.narrowed, chosen, files, root, editor.options, built)
    bound = editor.options.max_workspace_files
    left_out = max(0, len(files) - bound) if bound else 0
    if left_out:
        editor.message(left_out_note(files, root, bound), lsp.MessageType.Warning)
        files = files[:bound]
    only_built = editor.options.only_built() or chosen.kind == workscope.BUILT
    job = Job(Priority.BACKGROUND, baseline=editor.baseline, only_built=only_built, scope=chosen.job_scope())
    tally = _Tally(skipped=Skipped(kconfig, only_built) if kconfig else None)
    work = asyncio.ensure_future(_audit_files(editor, root, files, opened, tally, job))
    try:
        await work
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # we were cancelled ourselves, not the progress
            raise
        return WorkspaceReport(files=tally.files, left_out=left_out, cancelled=True)
    error = SHUTTING_DOWN if editor.closing else tally.stop
    return WorkspaceReport(files=tally.files, error=error, left_out=left_out)


async def _choose(editor: Editor, root: Path, files: list[Path], opened: set[Path]) -> workscope.Scope | None:
    """Everything, when the estimate is within ``askAboveUnits``; else the scope the person picks (None:
    cancelled), or, from a client that cannot be asked, the narrowest that applies (said, with how to ask for
    another)."""
    options = editor.options
    bound = options.max_workspace_files
    every = workscope.Scope(workscope.ALL)
    if not options.ask_above_units:
        return every
    cost = await workscope.estimate(files[:bound] if bound else files, editor.service.split, options.kernel_macros)
    if cost.units <= options.ask_above_units:
        return every
    status = await editor.service.pool.status()
    in_git = await asyncio.to_thread(workscope.in_git, root, options)
    scopes = workscope.offered(root, options, opened, in_git)
    said = f"k3 workspace audit: {cost.said(status)}; over askAboveUnits ({options.ask_above_units:,})."
    if editor.asks:
        titles = [s.title(root) for s in scopes]
        answer = await editor.ask(f"{said} Which code should it audit?", [*titles, workscope.CANCEL])
        return scopes[titles.index(answer)] if answer in titles else None
    narrower = scopes[0] if scopes[0].kind != workscope.ALL else None
    how = 'run k3lsp.auditWorkspace with "all", "changed", "built" or a folder to choose'
    if narrower is None:
        editor.message(f"{said} Nothing was started: {how}.", lsp.MessageType.Warning)
    else:
        editor.message(f"{said} Auditing {narrower.title(root).lower()} only: {how}.", lsp.MessageType.Warning)
    return narrower


async def _audit_files(
    editor: Editor, root: Path, files: list[Path], opened: set[Path], tally: _Tally, job: Job
) -> None:
    """The files, a few at a time, under the cancellable progress; counted in ``tally`` as they end."""
    async with editor.progress_bar("k3 audit workspace", len(files)) as report:
        queue: asyncio.Queue[Path] = asyncio.Queue()
        for path in files:
            queue.put_nowait(path)

        async def worker() -> None:
            while not queue.empty() and tally.stop is None and not editor.closing:
                path = queue.get_nowait()
                if path in opened:
                    error, incomplete = (await editor.audit_and_wait(_uri(path), priority=Priority.BACKGROUND)).error, 0
                else:
                    error, incomplete = await audit_closed(editor, root, path, job, tally.skipped)
                tally.files += 1
                tally.incomplete += incomplete
                report(tally.files, f"{tally.files}/{len(files)} files ({path.relative_to(root).as_posix()})")
                if error is not None and not editor.service.pool.state.state.usable:
                    tally.stop = error

        await asyncio.gather(*(worker() for _ in range(FILES_AT_ONCE)))
    said = tally.skipped.said() if tally.skipped is not None else None
    if said is not None:
        editor.message(f"k3 workspace audit: {said}", lsp.MessageType.Info)
    if tally.incomplete:
        editor.message(
            f"k3 workspace audit: {tally.incomplete:,} units were cut short (findings there may be missing); not "
            "cached, they are audited again next time.",
            lsp.MessageType.Warning,
        )


def _uri(path: Path) -> str:
    return from_fs_path(str(path)) or path.as_uri()


async def audit_closed(
    editor: Editor, root: Path, path: Path, job: Job, skipped: Skipped | None = None
) -> tuple[str | None, int]:
    """One file the editor has not opened: (why units were left or it was not audited, if so; units cut short). It
    becomes a document of the session only with something to show, or when the session had one for it. Its units
    the kconfig does not build are counted in ``skipped``."""
    uri = _uri(path)
    relpath = path.relative_to(root).as_posix()
    kept = editor.docs.get(uri)
    doc = kept or Document(uri, path, root, relpath)

    async def told(event: Event) -> None:
        if isinstance(event, Prepared):
            await editor.prepared(doc, event)  # its notes said, its split kept, its alerts
        elif isinstance(event, UnitDone):
            doc.record(event.result.unit.key, event.result.findings, event.result.refusal)

    audited = service.Document(path, root, relpath)
    outcome = await editor.service.audit([audited], told, job)
    if skipped is not None and outcome.skipped is not None:
        skipped.merge(outcome.skipped)
    file, summary = outcome.files[audited], outcome.summary
    if file.error is not None:
        return file.error, 0
    if kept is not None or any(doc.results.values()) or doc.refusals or doc.alerts:
        editor.docs[uri] = doc
        await editor.republish(doc)
        editor.keep_split(doc)  # opened next, its findings show without waiting for the splitter
    return (summary.unavailable if summary.left else None), file.incomplete
