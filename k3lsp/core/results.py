"""The cache policy: which units the cache answers, what is kept, and which units are never sent again.

The expensive thing is the model, so the core asks it as little as possible: a unit whose content address
(``Target.key``: text and context, and for a unit under review the change shown with it) was audited before
under a result key that answers for the daemon asked
(``k3lsp.wire.address.ResultKey``: its checkpoint, prompt version and identity; another configured daemon
serving the same checkpoint and prompt version answers too; so does a higher thinking effort) is answered from
the cache. Only complete audits are kept (``DoneStats.cut_short`` is None): one cut short is shown once and
audited again, never kept as a lasting "no findings". A unit the daemon refused as too long to audit is
remembered for this result key and prompt limit, so it is not even sent again. An answer the daemon took from
its team result store is not copied into this editor's cache: the store is the team's, the cache this user's,
and nothing another member's request put into the store may become this user's own result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from k3lsp.core.replies import DoneStats
from k3lsp.core.run import Target, UnitResult
from k3lsp.wire.address import ResultKey
from k3lsp.wire.cache import ResultCache


@dataclass(frozen=True)
class Lookup:
    """What the cache answered for some targets, and what still needs a daemon."""

    hits: list[UnitResult]
    misses: list[Target]


class Results:
    """The cache and the memory of refused units, for every daemon of one pool."""

    def __init__(self, cache: ResultCache):
        self.cache = cache
        self._refused: dict[tuple, str] = {}  # (unit key, result key, prompt limit) -> the refusal

    def lookup(
        self,
        targets: Sequence[Target],
        keys: Sequence[ResultKey],
        effort: str,
        limit: int | None,
        *,
        force: bool,
        variant: str = "",
    ) -> Lookup:
        """Split targets into results the cache holds under ``keys`` (the daemon asked first, then the others
        whose results answer for it) at ``effort`` or higher, and targets to audit. ``force`` (a re-audit)
        treats everything but a refusal as a miss; ``limit`` is the asked daemon's prompt limit; ``variant`` the way
        of asking beyond the effort (``AuditRun.variant``). A unit is filed under ``Target.key``: its content and
        the analyzer alerts it was sent with."""
        own = keys[0] if keys else None
        digests = (
            []
            if force or own is None
            else [d for k in keys if k.same_answers(own) for d in k.answering(effort, variant)]
        )
        hits, misses = [], []
        for target in targets:
            refusal = self._refused.get((target.key, own, limit))
            if refusal is not None:  # even when forced: it would be refused the same way
                hits.append(UnitResult(target, [], DoneStats.of({}), refusal=refusal))
                continue
            row = next((r for d in digests if (r := self.cache.get(target.key, d)) is not None), None)
            if row is None:
                misses.append(target)
            else:
                hits.append(UnitResult(target, list(row.findings), DoneStats.of(row.stats)))
        return Lookup(hits, misses)

    def keep(self, result: UnitResult, key: ResultKey | None, effort: str, variant: str = "") -> None:
        """File a daemon's complete answer under its key; a cut-short one, or one from the team store, is not."""
        if key is None or result.cut_short is not None or result.stats.from_store:
            return
        self.cache.put(result.target.key, key.digest(effort, variant), result.findings, result.stats.raw)

    def refuse(self, target: Target, key: ResultKey | None, limit: int | None, why: str) -> None:
        """Remember that the daemon under ``key`` with this prompt limit refused this unit as too long."""
        self._refused[(target.key, key, limit)] = why
