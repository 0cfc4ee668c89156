"""``k3lsp.auditWorkspace``: every C file of the workspace at background priority, a kernel tree included.

The files come in the order a person wants them: the files open in the editor, then the rest by when they
last changed, newest first. ``maxWorkspaceFiles`` bounds how many (0: no bound); what a bound leaves out is
said in one message. The file list is walked off the event loop. A file's audit is an ordinary run of the
audit core at background priority, a few files at once so the daemons always have units to batch; the
server keeps a document only for files with something to show (a finding or a refusal), so 50,000 files
audited cost 50,000 cache rows and no more server memory than their findings.

Cancelling its progress in the editor (``window/workDoneProgress/cancel``) stops the work and answers the request
with what was done and ``cancelled``: the files are audited in a task of their own, which the progress cancels,
so the command's own task returns. (Cancelling the command's task instead would leave the request unanswered:
pygls runs a command as a step of a generator that lets the CancelledError escape.)
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types as lsp
from pygls.uris import from_fs_path, to_fs_path

from k3lsp.core.options import Options, admitted_files
from k3lsp.core.run import Target
from k3lsp.units import split as units
from k3lsp.wire.protocol import Priority

if TYPE_CHECKING:
    from k3lsp.lsp.session import Session

SHUTTING_DOWN = "the server is shutting down"
FILES_AT_ONCE = 4  # files whose units are queued together: enough for the daemons to batch, few enough to stop


@dataclass(frozen=True)
class WorkspaceReport:
    """The answer of ``k3lsp.auditWorkspace``."""

    files: int = 0  # files audited (or looked up)
    error: str | None = None
    left_out: int = 0  # files beyond maxWorkspaceFiles, not audited
    cancelled: bool = False  # the editor cancelled its progress: ``files`` were done by then


def ordered_files(root: Path, options: Options, open_paths: set[Path]) -> list[Path]:
    """The admitted files of the workspace, open ones first, then by modification time, newest first."""

    def mtime(path: Path) -> float:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return 0.0

    files = list(admitted_files(root, root, options))
    return sorted(files, key=lambda p: (p not in open_paths, -mtime(p)))


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


async def audit(session: Session) -> WorkspaceReport:
    root = session.root
    if session.closing:
        return WorkspaceReport(error=SHUTTING_DOWN)
    if root is None:
        return WorkspaceReport(error="no workspace folder is open")
    opened = {Path(to_fs_path(uri) or uri) for uri in session.ls.workspace.text_documents}
    files = await asyncio.to_thread(ordered_files, root, session.options, opened)
    bound = session.options.max_workspace_files
    left_out = max(0, len(files) - bound) if bound else 0
    if left_out:
        session.message(left_out_note(files, root, bound), lsp.MessageType.Warning)
        files = files[:bound]
    tally = _Tally()
    work = asyncio.ensure_future(_audit_files(session, root, files, tally))
    try:
        await work
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # we were cancelled ourselves, not the progress
            raise
        return WorkspaceReport(files=tally.files, left_out=left_out, cancelled=True)
    error = SHUTTING_DOWN if session.closing else tally.stop
    return WorkspaceReport(files=tally.files, error=error, left_out=left_out)


async def _audit_files(session: Session, root: Path, files: list[Path], tally: _Tally) -> None:
    """The files, a few at a time, under the cancellable progress; counted in ``tally`` as they end."""
    async with session.progress_bar("k3 audit workspace", len(files)) as report:
        queue: asyncio.Queue[Path] = asyncio.Queue()
        for path in files:
            queue.put_nowait(path)

        async def worker() -> None:
            while not queue.empty() and tally.stop is None and not session.closing:
                path = queue.get_nowait()
                error, incomplete = await audit_file(session, root, path)
                tally.files += 1
                tally.incomplete += incomplete
                report(tally.files, f"{tally.files}/{len(files)} files ({path.relative_to(root).as_posix()})")
                if error is not None and not session.pool.state.state.usable:
                    tally.stop = error

        await asyncio.gather(*(worker() for _ in range(FILES_AT_ONCE)))
    if tally.incomplete:
        session.message(
            f"k3 workspace audit: {tally.incomplete:,} units were cut short (findings there may be missing); not "
            "cached, they are audited again next time.",
            lsp.MessageType.Warning,
        )


async def audit_file(session: Session, root: Path, path: Path) -> tuple[str | None, int]:
    """One file of a workspace audit: (why units were left, if they were; units cut short). An open document
    goes through the editor's own audit (its task, its text, its messages)."""
    uri = from_fs_path(str(path)) or path.as_uri()
    if uri in session.ls.workspace.text_documents:
        report = await session.audit_and_wait(uri, priority=Priority.BACKGROUND)
        return report.error, 0
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"cannot read {path}: {exc}", 0
    relpath = path.relative_to(root).as_posix()
    split = await session.split(text)
    note = units.fallback_note(split)
    if note is not None:
        session.message(f"{relpath}: {note}", lsp.MessageType.Warning)
    run = session.pool.audit([Target(root, relpath, u) for u in split], priority=Priority.BACKGROUND)
    results = [r async for r in run.audited()]
    if any(r.findings or r.refusal for r in results) or uri in session.docs:  # only files with something to show
        doc = session.document(uri)
        for r in results:
            doc.record(r.unit.key, r.findings, r.refusal)
        await session.republish(doc)
    summary = run.summary
    return (summary.unavailable if summary.left else None), len(summary.incomplete)
