"""The workspace an MCP server is rooted at: its root, its audit service, and the findings it shows now.

One per server process. Every path a tool or a resource names goes through :meth:`Workspace.confined`, the rules
the model's own workspace tools keep (``k3lsp.tools.confine``: no absolute path, no ``..``, no hidden component,
no symlink out of the root, no secret place, no special, hard-linked, binary or oversized file), so an agent
reads nothing the audit model could not. The findings shown per file are what the agent was last given for it (by
``audit_file`` or its ``k3lsp://findings/...`` resource), kept with their units so ``explain`` can ask about one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from k3lsp.cli.admission import Source
from k3lsp.core.pool import Pool
from k3lsp.core.service import AuditService
from k3lsp.findings import suppress
from k3lsp.findings.model import Finding
from k3lsp.tools import confine
from k3lsp.units import split as units


@dataclass(frozen=True)
class Shown:
    """One finding shown for a file: what the agent was given, and the unit and finding ``explain`` sends."""

    given: dict[str, Any]
    unit: units.Unit
    finding: Finding


@dataclass
class Workspace:
    root: Path  # resolved
    service: AuditService
    shown: dict[str, list[Shown]] = field(default_factory=dict)  # workspace-relative path -> its findings now

    @property
    def pool(self) -> Pool:
        return self.service.pool

    def baseline(self) -> suppress.Baseline:
        """The workspace's accepted findings, read again for each call (the user may have added one)."""
        return suppress.Baseline.load(self.root)

    def confined(self, path: str) -> tuple[Path, str]:
        """The real path and workspace-relative name of a file an agent named; a ToolError saying why not."""
        try:
            real = confine.resolve(self.root, path)
            confine.check_file(real, path)
        except confine.ToolError as exc:
            raise ToolError(f"{exc} (the workspace root is {self.root})") from None
        return real, real.relative_to(self.root).as_posix()

    def source(self, path: str) -> Source:
        """A file an agent named, read under the same rules and split as every front end splits it; only a file
        the ``include``/``exclude`` settings audit (a README split as C would cost the daemon for nothing)."""
        real, rel = self.confined(path)
        o = self.service.options
        if not o.wants(rel):
            raise ToolError(
                f"{rel} is not a file the settings audit (include {', '.join(o.include)}; exclude "
                f"{', '.join(o.exclude)}): name a C source or header"
            )
        try:
            text = confine.read_text(real, path)
        except (confine.ToolError, OSError) as exc:
            raise ToolError(f"{path}: cannot be read: {exc}") from None
        return Source(real, rel, text.split("\n"), units.split(text, o.kernel_macros))

    def show(self, rel: str, found: list[Shown], functions: set[str] | None = None) -> None:
        """A file's findings after an audit of it: all of them, or those of ``functions`` only."""
        kept = [s for s in self.shown.get(rel, []) if functions is not None and s.unit.name not in functions]
        self.shown[rel] = kept + found
        if not self.shown[rel]:
            del self.shown[rel]
