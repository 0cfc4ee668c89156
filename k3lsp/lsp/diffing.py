"""How diagnostics follow the edits made between saves.

Audits happen on save, edits happen between saves. A diagnostic published at the last save must never
point at the wrong line meanwhile (rust-analyzer#4056): when lines are
inserted or removed above its unit it moves with them; when its unit's own text is touched it is
dropped (the finding may no longer hold) until the next audit. `follow_edits` applies LSP
`didChange` content changes (range + text, in order) to anchors that remember their unit's lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import attrs
from lsprotocol import types as lsp

from k3lsp.findings.spans import utf16_len
from k3lsp.units.split import Unit

T = TypeVar("T")


@dataclass(frozen=True)
class Anchor(Generic[T]):
    """An item (e.g. a Diagnostic) living inside a unit's lines, tracked across edits."""

    unit_start: int  # 0-based file line of the unit's first line, in the current text
    unit_end: int  # its last line, inclusive
    last_line_chars: int  # UTF-16 length of the last line: an edit right after it leaves the unit intact
    item: T
    shift: int = 0  # lines the unit has moved since the item was anchored

    @classmethod
    def on(cls, unit: Unit, item: T) -> Anchor[T]:
        return cls(unit.start_line, unit.end_line, utf16_len(unit.text.rsplit("\n", 1)[-1]), item)


def follow_edits(anchors: Sequence[Anchor[T]], changes: Sequence[Any]) -> list[Anchor[T]]:
    """Apply didChange content changes, in order, to anchors: shifted when the edit is above their unit,
    unchanged when below, dropped when it touches the unit's text. A change without a range (the whole
    document replaced) drops everything."""
    current = list(anchors)
    for change in changes:
        rng = getattr(change, "range", None)
        if rng is None:
            return []
        current = [a for a in (_apply(a, rng, change.text) for a in current) if a is not None]
    return current


def _apply(a: Anchor[T], rng: lsp.Range, text: str) -> Anchor[T] | None:
    start, end = (rng.start.line, rng.start.character), (rng.end.line, rng.end.character)
    if start > (a.unit_end, a.last_line_chars) or (start == (a.unit_end, a.last_line_chars) and text[:1] == "\n"):
        return a  # after the unit (a newline typed right after its closing brace included)
    delta = text.count("\n") - (end[0] - start[0])
    # Before the unit: ends on an earlier line, or exactly at the start of its first line while leaving
    # that line intact (the inserted text ends with a newline, or whole lines were deleted).
    if end[0] < a.unit_start or (end == (a.unit_start, 0) and (text.endswith("\n") or (text == "" and start[1] == 0))):
        return replace(a, unit_start=a.unit_start + delta, unit_end=a.unit_end + delta, shift=a.shift + delta)
    return None


def shift_range(rng: lsp.Range, lines: int) -> lsp.Range:
    return lsp.Range(
        lsp.Position(rng.start.line + lines, rng.start.character),
        lsp.Position(rng.end.line + lines, rng.end.character),
    )


def shifted(diagnostic: lsp.Diagnostic, lines: int) -> lsp.Diagnostic:
    """A diagnostic moved by `lines` (an anchor's shift), with its trace locations."""
    if lines == 0:
        return diagnostic
    related = diagnostic.related_information
    if related:
        related = [
            attrs.evolve(r, location=attrs.evolve(r.location, range=shift_range(r.location.range, lines)))
            for r in related
        ]
    return attrs.evolve(diagnostic, range=shift_range(diagnostic.range, lines), related_information=related)
