"""A finding in a terminal as compilers print a diagnostic: the location line, then the model's message, the source
line with a caret under the range, the trace as notes and the fix, each at its own location.

```
src/net/parse.c:12:2: high CWE-787 memcpy overflows data
    n is not checked against sizeof(p->data)
   12 |         memcpy(p->data, in, n);
      |         ^~~~~~~~~~~~~~~~~~~~~~~
src/net/parse.c:10:1: note: n comes from the caller
src/net/parse.c:12:2: fix: replace line 12 with:
   12 |         memcpy(p->data, in, min_t(int, n, sizeof(p->data)));
```

The first line is the one `k3lsp audit` prints alone when its output is not a terminal (scripts and editors'
problem matchers read that form). Everything shown comes from the audited tree or from the model: the model's words
go through ``sanitize.line``; a source line keeps its layout (tabs expanded as a terminal does, so the caret stays
under its column) with every unprintable character shown as ``?``, one cell for one character.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.cells import cell_len

from k3lsp.findings.report import Reported
from k3lsp.wire import sanitize

TAB = 8  # columns per tab stop, as terminals and gcc's caret lines count them
GUTTER = 5  # width of the line-number gutter


def headline(r: Reported) -> str:
    """``path:line:col: severity CWE-n title``: the finding in one line."""
    return sanitize.line(f"{r.path}:{r.line}:{r.column}: {r.severity} CWE-{r.cwe} {r.title}")


def detailed(r: Reported, source: Callable[[str], list[str] | None]) -> list[str]:
    """The finding's lines; ``source(path)`` gives the file's lines (None: unreadable, shown without them)."""
    lines = source(r.path)
    out = [headline(r)]
    if r.message.strip():
        out.append("    " + sanitize.line(r.message))
    out += _quoted(lines, r.line, r.column, r.end_line, r.end_column)
    for step in r.trace:
        out.append(sanitize.line(f"{r.path}:{step.span.line}:{step.span.column}: note: {step.note}"))
    if r.fix is not None:
        first, last = r.fix.span.line, r.fix.span.end_line
        which = f"line {first}" if first == last else f"lines {first}-{last}"
        out.append(sanitize.line(f"{r.path}:{first}:1: fix: replace {which} with:"))
        out += [_gutter(first + i) + _layout(text) for i, text in enumerate(r.fix.replacement.split("\n"))]
    return out


def _quoted(lines: list[str] | None, line: int, column: int, end_line: int, end_column: int) -> list[str]:
    """The source line of a range and its caret line (a range over several lines: to the end of the first)."""
    if lines is None or not 0 < line <= len(lines):
        return []
    text = lines[line - 1]
    start = _index(text, column)
    end = _index(text, end_column) if end_line == line else len(text)
    before, marked = _layout(text[:start]), _layout(text[start:end], cell_len(_layout(text[:start])))
    caret = " " * cell_len(before) + "^" + "~" * max(cell_len(marked) - 1, 0)
    return [_gutter(line) + _layout(text), " " * GUTTER + " | " + caret]


def _index(text: str, utf16_column: int) -> int:
    """The character index of a 1-based UTF-16 column (the report's columns, as the editor's)."""
    units = 0
    for i, ch in enumerate(text):
        if units >= utf16_column - 1:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(text)


def _layout(text: str, at: int = 0) -> str:
    """Text as a terminal shows it from cell ``at``: tabs to the next stop, anything unprintable as ``?``."""
    out = []
    for ch in text:
        if ch == "\t":
            width = TAB - (at % TAB)
            out.append(" " * width)
            at += width
            continue
        shown = ch if ch.isprintable() else "?"
        out.append(shown)
        at += cell_len(shown)
    return "".join(out)


def _gutter(number: int) -> str:
    return f"{number:>{GUTTER}} | "
