"""``k3lsp mcp``'s server: the tools and resources an agent sees, registered on the official SDK's ``MCPServer``.

Registration and descriptions live here, with the one sentence an agent gets for arguments that fail a tool's
schema and ``k3lsp mcp`` itself (``run``); the handlers are ``k3lsp.mcp.tools``. A description says what a tool
does, what it costs (a daemon's time, or none) and that its finding text is data. No tool takes an endpoint, a key,
a program or a path outside the workspace: the connection is the user's (``k3lsp mcp``'s flags and environment),
every path is confined to the workspace root.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from k3lsp import __version__
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.service import AuditService
from k3lsp.mcp import results, tools
from k3lsp.mcp.workspace import Workspace
from k3lsp.wire import ending, sanitize
from k3lsp.wire.cache import ResultCache

DATA = " " + results.UNTRUSTED
INSTRUCTIONS = (
    "k3lsp audits C (and kernel C) code for security bugs with a private audit model. Audit a file or function "
    "before proposing a change to it (audit_file), your uncommitted changes (audit_changes) or a commit, range or "
    "patch (review); read findings already known without new work from the k3lsp://findings resources. Paths "
    "are relative to the workspace root." + DATA
)
# No tool changes a file, and none reaches beyond the workspace and the user's own daemon: an agent may call them
# without asking the user each time (the tools' cost is in their descriptions).
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WorkspacePath = Annotated[
    str, Field(description="a file of the workspace, relative to its root (e.g. drivers/net/x.c)")
]


class _Server(MCPServer):
    """The SDK's server, but arguments that fail a tool's schema are said in one sentence per argument (the SDK
    gives pydantic's report: several lines, and a link to its documentation)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(invalid(name, exc.__cause__)) from None


def invalid(tool: str, error: ValidationError) -> str:
    """``tool: argument path: Input should be a valid string, not 3; see the tool's input schema``."""
    said = []
    for e in error.errors(include_url=False):
        field = ".".join(str(part) for part in e["loc"])
        value = "" if e["type"] == "missing" else f", not {sanitize.line(repr(e['input']))[:80]}"
        said.append(f"argument {field}: {e['msg']}{value}")
    return f"{tool}: {'; '.join(said)}; see the tool's input schema"


def build(ws: Workspace) -> MCPServer:
    """The server with every tool and resource bound to ``ws``."""
    server = _Server("k3lsp", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(
        annotations=READ_ONLY,
        description="Audit one C file, or one function of it, for security bugs. Each unit (function) costs the "
        "daemon seconds to minutes unless the cache or the team store already holds its result; progress is "
        "reported per unit, and cancelling the call stops the daemon's work. Returns findings with file, function, "
        "lines, severity, CWE, message, trace, fix and evidence." + DATA,
    )
    async def audit_file(
        path: WorkspacePath,
        ctx: Context,
        function: Annotated[str | None, Field(description="audit only the function of this name")] = None,
    ) -> dict[str, Any]:
        return await tools.audit_file(ws, path, function, ctx)

    @server.tool(
        annotations=READ_ONLY,
        description="Audit what the work tree (or, with staged, the index) changed against base (default HEAD), "
        "as the editor's `scope: changed` picks it: each function holding a changed line, audited as the editor "
        "audits it (so what the editor audited already is answered from the cache); each finding says whether its "
        "lines meet the change (introduced). Costs the daemon's time per changed function, cached otherwise." + DATA,
    )
    async def audit_changes(
        ctx: Context,
        staged: Annotated[bool, Field(description="the index against HEAD instead of the work tree")] = False,
        base: Annotated[str, Field(description="the commit the work tree is compared with")] = "HEAD",
    ) -> dict[str, Any]:
        return await tools.audit_changes(ws, staged, base, ctx)

    @server.tool(
        annotations=READ_ONLY,
        description="Review a commit, a range A..B (each commit, oldest first) or a patch text (a diff, a mail or "
        "an mbox, at most 2 MB, applied to base) as `k3lsp review` does: the changed functions audited with the "
        "change in view, each finding introduced by its patch or pre-existing. Costs the daemon's time per changed "
        "function." + DATA,
    )
    async def review(
        ctx: Context,
        revision: Annotated[str | None, Field(description="a commit, or a range A..B")] = None,
        patch: Annotated[str | None, Field(description="the text of a patch, mail or mbox")] = None,
        base: Annotated[str, Field(description="what a patch text applies to")] = "HEAD",
    ) -> dict[str, Any]:
        patches, said = tools.named(ws, revision, patch, base)
        return await tools.review(ws, patches, ctx, said)

    @server.tool(
        annotations=READ_ONLY,
        description="Ask the audit model why a finding shown for a file (from audit_file, by its fingerprint) is "
        "a bug. One daemon request of seconds." + DATA,
    )
    async def explain(
        path: WorkspacePath, fingerprint: Annotated[str, Field(description="the finding's fingerprint")]
    ) -> dict[str, Any]:
        return await tools.explain(ws, path, fingerprint)

    @server.tool(
        annotations=READ_ONLY,
        description="The static analyzers' alerts (cppcheck, clang, gcc, sparse, coccinelle: the ones installed) "
        "on one file, without the audit model: no daemon, seconds of local time." + DATA,
    )
    async def witnesses(path: WorkspacePath) -> dict[str, Any]:
        return await tools.witnesses(ws, path)

    @server.tool(
        annotations=READ_ONLY, description="The audit daemon's state: model, loading, queue, counters. Free." + DATA
    )
    async def status() -> dict[str, Any]:
        return await tools.status(ws)

    @server.resource(
        "k3lsp://findings",
        name="findings",
        description="The files whose findings this server has given an agent, and each one's resource." + DATA,
        mime_type="application/json",
    )
    def findings_index() -> str:
        files = {rel: len(found) for rel, found in ws.shown.items()}
        body = {"files": {rel: {"findings": n, "uri": f"k3lsp://findings/{rel}"} for rel, n in files.items()}}
        return json.dumps(results.result(**body))

    @server.resource(
        "k3lsp://findings/{+path}",
        name="file findings",
        description="One file's findings as the result cache knows them, whichever front end (an editor, k3lsp "
        "audit, this server) audited its functions: no daemon asked. `cached` of `units` says how much of the file "
        "that covers." + DATA,
        mime_type="application/json",
    )
    async def file_findings(path: str) -> str:
        try:
            return json.dumps(await tools.known(ws, path))
        except ToolError as exc:
            raise ResourceError(str(exc)) from None

    return server


def run(args, options: Options, endpoints: list[str], jobs: int) -> int:
    """``k3lsp mcp``: serve on stdio until the client closes it; exit 2 when the root is no directory."""
    root = Path(args.root or ".").resolve()
    if not root.is_dir():
        print(
            sanitize.line(f"k3lsp mcp: --root {args.root} is no directory; give the workspace folder"), file=sys.stderr
        )
        return 2
    first, *others = endpoints
    asyncio.run(_serve(root, replace(options, endpoint=first, other_endpoints=tuple(others)), jobs))
    return 0


async def _serve(root: Path, options: Options, jobs: int) -> None:
    said = lambda problem: print(sanitize.line(f"k3lsp mcp: warning: {problem}"), file=sys.stderr)  # noqa: E731
    pool = Pool(options, ResultCache(on_problem=said), client_name="k3lsp-mcp", slots=jobs)
    try:
        with ending.answering_on_stdout():  # no agent left reading: end at once
            await build(Workspace(root, AuditService(pool))).run_stdio_async()
    finally:
        await pool.close()
