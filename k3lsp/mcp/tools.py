"""The MCP tools' handlers: arguments in, the audit service's (or a review's) answer out, as structured results.

Each handler is a few lines: confine and read what the agent named (``Workspace``), hand it to the service as a
document and job (or to ``k3lsp.review.changed`` as patches), turn the events into findings (``results``). No
handler audits anything itself, so a finding here is the finding the editor shows for the same settings, and an
unchanged function audited by any front end is answered from the cache.

Cancelling a call (``notifications/cancelled``) cancels the handler's task; the service leaves its runs, which
withdraws their units from the daemons (``k3lsp.core.service``: cancelling).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from k3lsp.cli import batch
from k3lsp.cli.admission import Source
from k3lsp.core import service
from k3lsp.core.client import DaemonError
from k3lsp.core.connection import DaemonUnavailable
from k3lsp.core.run import Summary
from k3lsp.core.tally import ProgressLine, Tally
from k3lsp.findings.pipeline import Reportable
from k3lsp.git import patches as gitpatches
from k3lsp.git import repo as gitrepo
from k3lsp.kbuild.state import State
from k3lsp.mcp import results
from k3lsp.mcp.progress import reporting
from k3lsp.mcp.workspace import Shown, Workspace
from k3lsp.review import changed, mbox, series
from k3lsp.wire import sanitize
from k3lsp.wire.protocol import Priority
from k3lsp.witnesses.analyze import analyze, available

MAX_PATCH_BYTES = 2 * 1024 * 1024  # a series of dozens of patches; a bigger one is reviewed by its commits


@dataclass
class Said:
    """What a call says beside its findings (``k3lsp.core.tally``'s report)."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False


def _nothing_looked_at(errors: list[str], results: int) -> None:
    """A call with errors and no unit result is an error, never an empty list of findings an agent reads as safe."""
    if errors and not results:
        raise ToolError(sanitize.line("nothing was audited: " + "; ".join(errors)))


def _counts(summary: Summary) -> dict[str, int]:
    return {"units": summary.units, "cached": summary.cached, "audited": summary.audited}


async def audit_file(ws: Workspace, path: str, function: str | None, ctx: Context) -> dict[str, Any]:
    """One file (or one function of it) through the audit service, as the editor audits it on save."""
    source = ws.source(path)
    at = None
    if function is not None:
        named = [u for u in source.units if u.name == function]
        if not named:
            names = ", ".join(sorted({u.name for u in source.units})[:30]) or "none"
            raise ToolError(f"{function!r} is no function of {source.rel}; its units are: {names}")
        at = frozenset(u.start_line for u in named)
    async with reporting(ctx) as report:
        job = service.Job(Priority.INTERACTIVE, baseline=ws.baseline(), only_built=ws.service.options.only_built())
        found, said, summary = await _audited(ws, [Picked(source, at)], job, report)
    _nothing_looked_at(said.errors, summary.cached + summary.audited)
    if not said.errors:
        ws.show(source.rel, found, {function} if function is not None else None)
    return results.result(
        file=source.rel,
        **_counts(summary),
        findings=[s.given for s in found],
        errors=said.errors,
        warnings=said.warnings,
    )


async def known(ws: Workspace, path: str) -> dict[str, Any]:
    """A file's findings as the cache knows them (whichever front end audited its units), asking no daemon: the
    ``k3lsp://findings/{path}`` resource. ``cached`` of ``units`` says how much of the file that covers."""
    source = ws.source(path)
    job = service.Job(priority=Priority.INTERACTIVE, baseline=ws.baseline(), cached_only=True)
    found, said, summary = await _audited(ws, [Picked(source)], job, None)
    ws.show(source.rel, found)  # what the agent was given: explain may ask about it
    return results.result(file=source.rel, **_counts(summary), findings=[s.given for s in found], errors=said.errors)


async def audit_changes(ws: Workspace, staged: bool, base: str, ctx: Context) -> dict[str, Any]:
    """What the work tree (or the index) changed against ``base``, picked as ``scope: changed`` picks it: each
    function holding a changed line, sent as the editor sends it (so what the editor audited answers from the cache),
    each finding introduced when its lines meet the change."""
    patch = _changes(ws, staged, base)
    planned = changed.plan(patch, ws.root, ws.service.options)
    picked = [
        Picked(f.source, frozenset(n - 1 for n in f.changed if f.source.lines[n - 1].strip()), f.changed)
        for f in planned.files.values()
    ]
    async with reporting(ctx) as report:
        job = service.Job(Priority.INTERACTIVE, baseline=ws.baseline(), only_built=ws.service.options.only_built())
        found, said, summary = await _audited(ws, [p for p in picked if p.at], job, report)
    _nothing_looked_at(said.errors, summary.cached + summary.audited)
    return results.result(
        changes="the index against HEAD" if staged else f"the work tree against {base}",
        files=[p.source.rel for p in picked if p.at],
        **_counts(summary),
        findings=[s.given for s in found],
        errors=said.errors,
        warnings=said.warnings + planned.notes,
    )


@dataclass(frozen=True)
class Picked:
    """A file to audit: its units holding the 0-based lines ``at`` (all without), and the 1-based lines a change
    added or modified (None: no change in view), which a finding meets when the change introduced it."""

    source: Source
    at: frozenset[int] | None = None
    changed: frozenset[int] | None = None

    def finding(self, r: Reportable, state: State | None = None) -> dict[str, Any]:
        row = batch.row(self.source, r, None, state)
        if self.changed is None:
            return results.finding(row)
        introduced = any(row.line <= n <= row.end_line for n in self.changed)
        return results.finding(row, introduced, changed.LINES if introduced else "")


async def _audited(
    ws: Workspace, picked: list[Picked], job: service.Job, report: ProgressLine | None
) -> tuple[list[Shown], Said, Summary]:
    """Files through the audit service as one job: their findings, by file and line, what was said, the summary."""
    docs = {
        service.Document(p.source.path, ws.root, p.source.rel, "\n".join(p.source.lines), units_at=p.at,
                         units=p.source.units): p
        for p in picked
    }  # fmt: skip
    found: list[Shown] = []
    said = Said()
    tally = Tally(said, report)

    def told(event: service.Event) -> None:
        tally(event)
        if isinstance(event, service.UnitDone):
            pick = docs[event.doc]
            found.extend(
                Shown(pick.finding(r, event.state), r.unit, r.finding) for r, why in event.findings if why is None
            )

    summary = await tally.run(ws.service, list(docs), told, job, asyncio.Event(), allow_incomplete=False, rerun="")
    assert summary is not None  # never stopped: a cancelled call ends by cancelling this task
    found.sort(key=lambda s: (s.given["file"], s.given["line"], s.given["cwe"]))
    return found, said, summary


async def review(ws: Workspace, patches: list[series.Patch], ctx: Context, said: list[str]) -> dict[str, Any]:
    """Patches reviewed as ``k3lsp review`` reviews them: each finding introduced by its patch or pre-existing."""
    repo = _repository(ws)
    async with reporting(ctx) as report:
        reviewed = await changed.review_patches(patches, repo, ws.service.options, ws.pool, on_progress=report)
    errors = [f"{p.patch.title}: {p.patch.error}" for p in reviewed.patches if p.patch.error] + reviewed.errors
    _nothing_looked_at(errors, len(reviewed.results))
    return results.result(
        patches=[
            {
                "patch": sanitize.line(p.patch.title),  # a mail's subject: the sender's words
                "commit": p.patch.commit,
                "error": p.patch.error and sanitize.line(p.patch.error),  # it may quote the patch's paths
                "units": len(p.units),
                "findings": [results.finding(f.row, f.introduced, f.why) for f in p.findings],
                "notes": [sanitize.line(n) for n in p.notes],
            }
            for p in reviewed.patches
        ],
        cached=sum(r.cached for r in reviewed.results),
        errors=errors,
        warnings=said + reviewed.warnings,
    )


def _changes(ws: Workspace, staged: bool, base: str) -> series.Patch:
    """The work tree (or the index, ``staged``) against ``base`` as one patch, the workspace at its repository's top
    (a change's paths are the repository's)."""
    repo = _repository(ws)
    if repo.workdir is None or repo.workdir.resolve() != ws.root:
        raise ToolError(f"audit_changes needs the workspace root at its repository's top ({repo.root}); start "
                        "k3lsp mcp with --root there")  # fmt: skip
    wanted = ws.service.options.wants
    try:
        patch = series.staged(repo, wanted) if staged else series.worktree(repo, repo.commit(base), wanted, base)
    except gitrepo.GitError as exc:
        raise ToolError(sanitize.line(f"cannot read the changes against {base!r}: {exc}")) from None
    if patch.error:
        raise ToolError(sanitize.line(patch.error))
    return patch


def named(ws: Workspace, revision: str | None, patch: str | None, base: str) -> tuple[list[series.Patch], list[str]]:
    """The patches a ``review`` call names: a commit, a range ``A..B``, or a patch text applied to ``base``."""
    if (revision is None) == (patch is None):
        raise ToolError("give either revision (a commit, or a range A..B) or patch (the text of a patch), not both")
    repo = _repository(ws)
    wanted = ws.service.options.wants
    try:
        if patch is not None:
            data = patch.encode("utf-8", "surrogatepass")
            if len(data) > MAX_PATCH_BYTES:
                raise ToolError(
                    f"the patch text is {len(data)} bytes, over the {MAX_PATCH_BYTES} a review takes here; commit "
                    "it and review the commit or range (revision) instead"
                )
            return series.mails(repo.tree(repo.commit(base)), mbox.parse(data, "patch")), []
        return series.revision(repo, revision, wanted)
    except (gitrepo.GitError, gitpatches.PatchError) as exc:
        raise ToolError(sanitize.line(str(exc))) from None


def _repository(ws: Workspace) -> gitrepo.Repository:
    try:
        return gitrepo.Repository(ws.root, ws.service.options.max_file_bytes)
    except gitrepo.GitError as exc:
        raise ToolError(f"the workspace {ws.root} is no git repository: {exc}") from None


async def explain(ws: Workspace, path: str, fingerprint: str) -> dict[str, Any]:
    """The model's explanation of a finding shown for a file (by its fingerprint)."""
    real, rel = ws.confined(path)
    shown = next((s for s in ws.shown.get(rel, []) if s.given["fingerprint"] == fingerprint), None)
    if shown is None:
        raise ToolError(
            f"no finding with fingerprint {fingerprint!r} is shown for {rel}; audit the file (audit_file) and pass "
            "the fingerprint of one of its findings"
        )
    try:
        doc = service.Document(real, ws.root, rel)
        parts = [p async for p in ws.service.explain(doc, shown.unit, shown.finding.to_dict())]
    except (DaemonUnavailable, DaemonError) as exc:
        raise ToolError(sanitize.line(f"cannot explain the finding: {exc}")) from None
    text = sanitize.text("".join(parts)).strip() or "(the model gave no explanation)"
    return results.result(finding=shown.given, explanation=text)


async def witnesses(ws: Workspace, path: str) -> dict[str, Any]:
    """The static analyzers' alerts on one file, no daemon asked: the ``witnesses`` setting's, else every one here."""
    source = ws.source(path)
    names = ws.service.options.witnesses or [n for n, found in available().items() if not isinstance(found, str)]
    if not names:
        raise ToolError("no static analyzer is installed here (k3lsp witnesses says how to install them)")
    text = "\n".join(source.lines)
    report = await asyncio.to_thread(analyze, source.path, text, ws.root, names, ws.pool.cache)
    return results.result(
        file=source.rel,
        alerts=[
            {"tool": a.tool, "rule": a.rule, "line": a.line, "cwe": a.cwe, "level": a.level, "message": a.message}
            for a in report.alerts
        ],
        problems=[f"{r.tool}: {r.problem}" for r in report.runs if r.problem is not None],
    )


async def status(ws: Workspace) -> dict[str, Any]:
    """The daemon's state, model, loading and queue, as the editor's status shows them, and what is shown here."""
    return results.result(
        workspace=str(ws.root),
        shown={rel: len(found) for rel, found in ws.shown.items()},
        **await ws.pool.status(),
    )
