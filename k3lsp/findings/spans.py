"""Where a finding sits in its file, in the project's own types: positions, ranges and edits.

The audit service and every front end (the language server, ``k3lsp audit``, SARIF, review, eval) compute with
these; only the language server turns them into LSP types, at its edge (``k3lsp.lsp.convert``). They count as LSP
does (0-based lines, columns in UTF-16 code units), so that translation is a copy, and SARIF's 1-based numbers are
these plus one (``k3lsp.findings.report.Span``).
"""

from __future__ import annotations

from dataclasses import dataclass

from k3lsp.units.split import Unit


@dataclass(frozen=True, order=True)
class Position:
    line: int  # 0-based file line
    character: int  # UTF-16 code units from the line's start


@dataclass(frozen=True)
class Range:
    start: Position
    end: Position  # exclusive


@dataclass(frozen=True)
class Edit:
    """Replace the text of ``range`` by ``new_text``."""

    range: Range
    new_text: str


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: LSP's default position encoding, and SARIF's columns."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def line_range(unit: Unit, start_line: int, end_line: int) -> Range:
    """The file range of unit lines start..end (1-based): from the first non-blank character of the
    first line to the end of the last, so the squiggle covers code, not indentation."""
    lines = unit.text.split("\n")
    first, last = lines[start_line - 1], lines[end_line - 1]
    indent = len(first) - len(first.lstrip())
    return Range(
        Position(unit.file_line(start_line), utf16_len(first[:indent])),
        Position(unit.file_line(end_line), utf16_len(last)),
    )


def whole_lines(unit: Unit, start_line: int, end_line: int, new_text: str) -> Edit:
    """Replace unit lines start..end (1-based) whole, from the first column to the end of the last line: how a
    suggested fix applies. The one place a fix's range is computed."""
    last = unit.text.split("\n")[end_line - 1]
    start = Position(unit.file_line(start_line), 0)
    return Edit(Range(start, Position(unit.file_line(end_line), utf16_len(last))), new_text)
