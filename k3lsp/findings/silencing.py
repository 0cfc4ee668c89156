"""What may silence a finding in ``k3lsp review``: never what the patches under review add themselves.

A CI gate asks what a change did. A reviewed commit that added ``/* k3-audit: ignore */`` on its bad line, or its
finding's fingerprint to ``.k3audit-baseline.json``, turned "1 introduced" (exit 1) into "1 silenced" (exit 0), and
a range could do the same from an earlier commit of its own. So in a review only what the base of the patches
already had silences a finding: a directive on a line the base had as it is, a baseline entry in the base's copy
of the baseline (and still in the patch's). What the patch's comments and baseline would silence beyond that is
reported as any finding is, with how the patches tried (``pipeline.IN_SOURCE`` or ``pipeline.EXTERNAL``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from k3lsp.findings import pipeline, suppress
from k3lsp.git.patches import between, changed_lines
from k3lsp.git.repo import Snapshot, WorktreeSnapshot
from k3lsp.units.split import Unit


@dataclass
class Silencers:
    """The suppressions a review applies. ``worktree``: the work tree's baseline (None: no work tree, no baseline);
    ``accepted``: the fingerprints in the base's copy of it; ``base``: the files before the first patch."""

    worktree: suppress.Baseline | None
    accepted: frozenset[str]
    base: Snapshot | None
    _new: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict, repr=False)  # by (path, text)
    _left: dict[int, tuple[Snapshot, suppress.Baseline]] = field(default_factory=dict, repr=False)  # by id(after)

    @classmethod
    def of(cls, worktree: suppress.Baseline | None, base: Snapshot | None) -> Silencers:
        accepted = suppress.fingerprints(base.read(suppress.BASELINE_NAME)) if base is not None else frozenset()
        return cls(worktree, accepted, base)

    def screened(
        self,
        unit: Unit,
        raws: Iterable[Any],
        lines: list[str],
        path: str,
        changed: Iterable[int],
        after: Snapshot,
        min_severity: str,
    ) -> Iterator[tuple[pipeline.Reportable, str | None, str]]:
        """``pipeline.screened`` for a unit of ``lines`` (the post-image ``after`` of ``path``, as the base named
        it), whose 1-based lines ``changed`` the patch added or modified: each finding, how it is silenced, and how
        the patches tried to silence it when that does not apply ("" when they did not)."""
        raws = list(raws)
        new = self.new_lines(path, lines) | frozenset(changed)
        unpatched = suppress.disarmed(lines, (n - 1 for n in new))
        left = self.left_by(after)
        kept = left.restricted(self.accepted) if left is not None else None
        applied = pipeline.screened(unit, raws, unpatched, min_severity, kept)
        claimed = pipeline.screened(unit, raws, lines, min_severity, left)
        for (found, silenced), (_, tried) in zip(applied, claimed, strict=True):
            yield (
                found,
                silenced,
                tried if silenced is None and tried in (pipeline.IN_SOURCE, pipeline.EXTERNAL) else "",
            )

    def left_by(self, after: Snapshot) -> suppress.Baseline | None:
        """The baseline as a patch leaves it: the copy in its post-image, or the work tree's for the work tree
        (whose snapshot reads no hidden file: the model's confinement)."""
        if self.worktree is None or isinstance(after, WorktreeSnapshot):
            return self.worktree
        if id(after) not in self._left:
            fingerprints = suppress.fingerprints(after.read(suppress.BASELINE_NAME))
            entries = {f: {"fingerprint": f} for f in fingerprints}
            self._left[id(after)] = (after, suppress.Baseline(self.worktree.path, entries))  # kept: ids stay unique
        return self._left[id(after)][1]

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
