"""Apply LSP edits to text, as an editor would: what tests use to check ranges and text edits.

Positions are (line, UTF-16 code unit), LSP's default encoding.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types as lsp


def offset(text: str, pos: lsp.Position) -> int:
    """The string index of an LSP position (clamped to the line's end, as clients do)."""
    lines = text.split("\n")
    if pos.line >= len(lines):
        return len(text)
    index = sum(len(line) + 1 for line in lines[: pos.line])
    units = 0
    for i, ch in enumerate(lines[pos.line]):
        if units >= pos.character:
            return index + i
        units += 2 if ord(ch) > 0xFFFF else 1
    return index + len(lines[pos.line])


def apply_change(text: str, rng: lsp.Range | None, new_text: str) -> str:
    """One didChange content change: `rng` None replaces the whole document."""
    if rng is None:
        return new_text
    return text[: offset(text, rng.start)] + new_text + text[offset(text, rng.end) :]


def apply_edits(text: str, edits: Sequence[lsp.TextEdit]) -> str:
    """Non-overlapping TextEdits, all relative to the original text (applied from the end)."""
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = apply_change(text, edit.range, edit.new_text)
    return text
