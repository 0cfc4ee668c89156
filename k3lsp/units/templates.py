"""Functions written inside a ``#define`` and expanded at file level: one unit per such #define, at its definition.

Drivers write families of functions once (drivers/hwmon/w83627ehf.c: ``#define show_in_reg(reg) static ssize_t
show_##reg(...) {...}``, then ``show_in_reg(in)``, ``show_in_reg(in_min)``; XNU's ``#define IMPL(T)``). That
code runs, so it is audited: once, where it is written (a unit per expansion would audit the same text again,
on lines that are not its own). The #define's whole lines are the unit, of kind ``macro_template``, named after
the functions in it as written (``show_##reg``; two are ``a+b``); the file-level lines that expand it are
context, so the model sees what the parameters become.

A #define is a template when its body, read as a file of its own by ``blocks.top_level`` (its name and
parameters, line continuations and ``#`` blanked so ``show_##reg`` reads as one name), holds a function
block: ``do { } while (0)``, ``({ ... })``, an initialiser or an unbalanced ``if (x) {`` are not templates.
Only #defines with a ``{`` are read, and each once: linear in the file.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from k3lsp.units import blocks, kernelc
from k3lsp.units.blocks import Block

KIND = "macro_template"

_HEAD = re.compile(rb"[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)\n]*\))?")
_FUNCTION_KINDS = ("function", "macro_body")
_PASTED = re.compile(rb"[A-Za-z_]\w*[ \t]*##[ \t]*$")  # `ITPREFIX ## ` before a name part
_PASTE = re.compile(rb"[ \t]*##[ \t]*")


@dataclass(frozen=True)
class Expansion:
    """A file-level line that expands a template: ``show_in_reg(in_min)``."""

    start: int  # its first byte
    end: int  # just past its argument list
    macro: str  # the template's macro name


def with_templates(normalised: kernelc.Normalised, found: list[Block]) -> tuple[list[Block], list[Expansion]]:
    """The blocks ``found`` with the file's macro templates among them, in file order, and the lines that
    expand those templates. A template inside a block (a #define the normaliser left in a body) is left out."""
    text = normalised.text
    taken = [(b.start, b.close) for b in found]
    made: list[Block] = []
    macros: dict[bytes, None] = {}
    for s, e, word in normalised.directives:
        if word == b"define" and text.find(b"{", s, e) >= 0:
            block, macro = _template(text, s, e, normalised.cpp)
            if block is not None and not _within(taken, block.start):
                made.append(block)
                macros[macro] = None
    if not made:
        return found, []
    merged = sorted(found + made, key=lambda b: b.start)
    return merged, _expansions(text, normalised.directives, merged, list(macros))


def macro_name(unit_text: bytes) -> str | None:
    """The macro a template unit's text defines (``show_in_reg``): what its expansions call."""
    m = _HEAD.match(unit_text)
    return m.group(1).decode() if m else None


def _template(text: bytes, s: int, e: int, cpp: bool) -> tuple[Block | None, bytes]:
    """The #define at text[s:e] as a template block (None when it defines no function) and its macro name."""
    head = _HEAD.match(text, s, e)
    if head is None:
        return None, b""
    body = bytearray(text[s:e])
    body[: head.end() - s] = b" " * (head.end() - s)
    body = body.replace(b"\\", b" ").replace(b"#", b"_")  # literals are blanked already: only continuations
    functions = [b for b in blocks.top_level(kernelc.Normalised(bytes(body), cpp)) if b.kind in _FUNCTION_KINDS]
    if not functions:
        return None, b""
    names = [_as_written(text, s, body, b) for b in functions]
    return Block(s, s + functions[0].open, e - 1, KIND, "+".join(names)), head.group(1)


def _as_written(text: bytes, s: int, body: bytearray, block: Block) -> str:
    """A function's name as the #define writes it (``show_##reg``, ``ITPREFIX ## _insert`` as
    ``ITPREFIX##_insert``): the blanked body keeps every offset; pasting with spaces around is followed back."""
    named = re.compile(rb"(?<!\w)" + re.escape(block.name.encode()) + rb"\s*\(").search(body, block.start, block.open)
    if named is None:
        return block.name
    start, end = s + named.start(), s + named.start() + len(block.name)
    while (paste := _PASTED.search(text, s, start)) is not None and paste.end() == start:
        start = paste.start()
    return _PASTE.sub(b"##", text[start:end]).decode("utf-8", "replace")


def _expansions(
    text: bytes, directives: list[tuple[int, int, bytes]], merged: list[Block], macros: list[bytes]
) -> list[Expansion]:
    """The calls of the template macros that start a line outside every block and directive."""
    taken = [(b.start, b.close) for b in merged]
    spans = [(s, e) for s, e, _ in directives]
    pattern = re.compile(rb"(?m)^[ \t]*(" + b"|".join(re.escape(m) for m in macros) + rb")[ \t]*\(")
    out = []
    for m in pattern.finditer(text):
        end = kernelc.arguments_end(text, m.end(1))
        if end is None or _within(taken, m.start(1)) or _within(spans, m.start(1)):
            continue
        out.append(Expansion(m.start(1), end, m.group(1).decode()))
    return out


def _within(spans: list[tuple[int, int]], at: int) -> bool:
    """Whether ``at`` is inside one of the (start, last byte) spans, sorted and disjoint."""
    k = bisect.bisect_right(spans, (at, 1 << 62)) - 1
    return k >= 0 and spans[k][0] <= at <= spans[k][1]
