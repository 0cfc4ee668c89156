"""Where the comments of a C file are, line by line: what a `k3-audit: ignore` directive may stand in.

A directive counts only inside a comment: ``puts("k3-audit: ignore");`` is code, and once hid a format-string
finding on its line. So the text is lexed as a C compiler's translation phases 2-3 see it: ``//`` comments to the
end of the line (a backslash-newline continues them onto the next), ``/* */`` comments across lines, and string
and character literals (their escapes, a backslash-newline inside them, and their end at an unescaped newline)
skipped as code. A ``'`` inside a number is a C23 digit separator (``1'000``), not a character literal. The
lexer never fails: unterminated literals and comments end where a compiler would give up (the line, the file).
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict

_TOKEN = re.compile(r"//|/\*|\"|'")


def on_lines(lines: list[str], last: int) -> dict[int, list[tuple[int, str]]]:
    """The comments of ``lines[0..last]`` (0-based, inclusive): per line, each comment part on it as (column, text).
    A comment over several lines has a part on each; columns count characters of that line."""
    text = "\n".join(lines[: last + 1])
    starts = [0]
    for line in lines[:last]:
        starts.append(starts[-1] + len(line) + 1)
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    pos = 0
    while (m := _TOKEN.search(text, pos)) is not None:
        token, start = m.group(), m.start()
        if token == "//":
            end = _line_comment_end(text, start)
            _add(out, text, starts, start, end)
        elif token == "/*":
            close = text.find("*/", start + 2)
            end = len(text) if close < 0 else close + 2
            _add(out, text, starts, start, end)
        elif token == "'" and _in_number(text, start):
            end = start + 1  # a digit separator
        else:
            end = _literal_end(text, start + 1, token)
        pos = end
    return out


def _in_number(text: str, quote: int) -> bool:
    """Whether the ``'`` at ``quote`` follows a pp-number (``1'000``, ``0xFF'FF``), not a prefix (``u8'a'``)."""
    start = quote
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.'"):
        start -= 1
    return start < quote and text[start].isdigit()


def _line_comment_end(text: str, start: int) -> int:
    """Where a ``//`` comment ends: the first newline not preceded by a backslash (a continuation), or the end."""
    pos = start
    while True:
        newline = text.find("\n", pos)
        if newline < 0:
            return len(text)
        if text[newline - 1] != "\\":
            return newline
        pos = newline + 1


def _literal_end(text: str, pos: int, quote: str) -> int:
    """Just past a string or character literal opened before ``pos``: its closing quote, else the unescaped
    newline or the end of the text where it stops."""
    while pos < len(text):
        c = text[pos]
        if c == "\\":
            pos += 2  # an escape, or a backslash-newline that continues the literal
        elif c == quote:
            return pos + 1
        elif c == "\n":
            return pos
        else:
            pos += 1
    return len(text)


def _add(out: dict[int, list[tuple[int, str]]], text: str, starts: list[int], start: int, end: int) -> None:
    """Record the comment text[start:end] on each line it covers."""
    first, last = (bisect.bisect_right(starts, offset) - 1 for offset in (start, max(start, end - 1)))
    for number in range(first, last + 1):
        begin = max(start, starts[number])
        stop = min(end, starts[number + 1] - 1 if number + 1 < len(starts) else len(text))
        out[number].append((begin - starts[number], text[begin:stop]))
