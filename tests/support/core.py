"""Running units through the audit core from a test, as a front end does: one run, its results and summary."""

from __future__ import annotations

import asyncio
from pathlib import Path

from k3lsp.core.pool import Pool
from k3lsp.core.run import Summary, Target, UnitResult
from k3lsp.units import split as units
from k3lsp.wire.protocol import Priority


def targets(source: str, path: str = "f.c", root: Path | None = None) -> list[Target]:
    """The units of ``source`` as targets in ``path`` (no root: no workspace tools)."""
    return [Target(root, path, u) for u in units.split(source)]


async def audit(
    pool: Pool,
    items: list[Target],
    *,
    priority: Priority = Priority.INTERACTIVE,
    force: bool = False,
    fresh: bool = False,
    timeout: float = 60,
) -> tuple[list[UnitResult], Summary]:
    """Every result of one run, in the order they came, and its summary."""
    run = pool.audit(items, priority=priority, force=force, fresh=fresh)

    async def collect() -> list[UnitResult]:
        return [r async for r in run.audited()]

    return await asyncio.wait_for(collect(), timeout), run.summary
