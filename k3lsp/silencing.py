"""What may silence a finding in ``k3lsp review``: never what the patches under review add themselves.

A CI gate asks what a change did. A reviewed commit that added ``/* k3-audit: ignore */`` on its bad line, or its
finding's fingerprint to ``.k3audit-baseline.json``, turned "1 introduced" (exit 1) into "1 silenced" (exit 0), and
a range could do the same from an earlier commit of its own. So in a review only what the base of the patches
already had silences a finding: a directive on a line the base had as it is, a baseline entry in the base's copy
of the baseline. What the work tree's comments and baseline would silence beyond that is reported as any finding
is, with how the patches tried (:data:`~k3lsp.pipeline.IN_SOURCE` or :data:`~k3lsp.pipeline.EXTERNAL`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from k3lsp import pipeline, suppress
from k3lsp.gitrepo import Snapshot
from k3lsp.patches import between, changed_lines
from k3lsp.units import Unit


@dataclass
class Silencers:
    """The suppressions a review applies. ``claimed``: the work tree's baseline (what the editor applies);
    ``kept``: its entries the base had; ``base``: the files before the first patch (None: there is none)."""

    claimed: suppress.Baseline | None
    kept: suppress.Baseline | None
    base: Snapshot | None
    _new: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict, repr=False)  # by (path, text)

    @classmethod
    def of(cls, baseline: suppress.Baseline | None, base: Snapshot | None) -> Silencers:
        before = suppress.fingerprints(base.read(suppress.BASELINE_NAME)) if base is not None else frozenset()
        return cls(baseline, baseline.restricted(before) if baseline is not None else None, base)

    def screened(
        self, unit: Unit, raws: Iterable[Any], lines: list[str], path: str, changed: Iterable[int], min_severity: str
    ) -> Iterator[tuple[pipeline.Reportable, str | None, str]]:
        """``pipeline.screened`` for a unit of ``lines`` (the post-image of ``path``, as the base named it), whose
        1-based lines ``changed`` the patch added or modified: each finding, how it is silenced, and how the
        patches tried to silence it when that does not apply ("" when they did not)."""
        raws = list(raws)
        new = self.new_lines(path, lines) | frozenset(changed)
        unpatched = suppress.disarmed(lines, (n - 1 for n in new))
        applied = pipeline.screened(unit, raws, unpatched, min_severity, self.kept)
        claimed = pipeline.screened(unit, raws, lines, min_severity, self.claimed)
        for (found, silenced), (_, tried) in zip(applied, claimed, strict=True):
            yield (
                found,
                silenced,
                tried if silenced is None and tried in (pipeline.IN_SOURCE, pipeline.EXTERNAL) else "",
            )

    def new_lines(self, path: str, lines: list[str]) -> frozenset[int]:
        """The 1-based lines the base did not have as they are: every line of a file the base had not."""
        text = "\n".join(lines)
        key = (path, text)
        if key not in self._new:
            before = self.base.read(path) if self.base is not None else None
            if before is None:
                self._new[key] = frozenset(range(1, len(lines) + 1))
            else:
                self._new[key] = frozenset(changed_lines(between(before, text.encode("utf-8", "surrogateescape"))))
        return self._new[key]
