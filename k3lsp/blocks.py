"""Where the functions of a C or C++ file are: its top-level brace blocks, and what each block's header says.

tree-sitter gives up on kernel files in ways that move or drop function boundaries (a body that swallows
the functions after it, a function cut at a loop macro, a definition left as loose tokens in an ERROR
node). Brace matching does not: on the normalised text (``kernelc.normalise``: comments and literals
blanked, one branch of each conditional inside a body, so braces balance) every top-level ``{ ... }``
is one block, and a function body is exactly one such block. So the splitter takes its boundaries from
here and tree-sitter only reads the file-level declarations.

Each block's header is the code between the previous top-level item (a ``;``, a block, a container's
brace) and its ``{``; preprocessor lines are skipped, not ends. The header says what the block is:

- ``... name(params) {`` (also ``name(params) const``, an attribute after it, ``(*name(params))(void)``,
  ``A::B::name``, ``operator==``, a C++ constructor's ``: member(x)`` list): the function ``name``;
- ``MACRO(first, ...) {``: a function defined by a macro, named as the kernel names it: ``sys_read`` for
  ``SYSCALL_DEFINE3(read, ...)``, ``compat_sys_x`` for ``COMPAT_SYSCALL_DEFINEn``, ``MACRO(first)`` else;
- anything with ``=``, or without a parameter list (``struct x {``, ``enum {``, ``x = {``): data (context);
- nothing at all: a stray block, audited as ``block@LINE``.

``extern "C" {`` (and in C++ ``namespace`` and class bodies) are containers: the blocks inside are top level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3lsp.kernelc import MAX_NESTING, TooDeep, directives

_TOKENS = re.compile(rb"[{};]")
_IDENT = re.compile(rb"[A-Za-z_]\w*")
_CALL = re.compile(rb"([A-Za-z_]\w*)\s*\(")
_SYSCALL = re.compile(r"^(COMPAT_)?SYSCALL_DEFINE\d$")
_MACRO_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")  # SYSCALL_DEFINE3, BPF_CALL_2, DEFINE_SHOW_ATTRIBUTE
_IDENT_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SPACE = frozenset(b" \t\r\n\f\v")
_OPERATOR_CHARS = frozenset(b"=!<>+-*/%&|^~[],")
_EXTERN = re.compile(rb"(?:^|\s)extern\s*\"[^\"]*\"\s*$")
_CPP_CONTAINER = re.compile(rb"(?:^|[\s>])(?:namespace|class|struct|union)\b[^()=]*$|^\s*namespace\s*$")
_ACCESS = re.compile(rb"\s*(?:(?:public|private|protected|signals|slots|Q_SLOTS)\s*:(?!:)\s*)+")
# Words that can stand before a parenthesis without being a function's name.
_NOT_NAMES = frozenset(
    b"if else for while do switch case return sizeof typeof __typeof__ __typeof alignof _Alignof "
    b"__alignof__ asm __asm__ __asm volatile __volatile__ goto default _Generic defined __attribute__ "
    b"static_assert _Static_assert decltype noexcept throw new delete".split()
)


@dataclass(frozen=True)
class Block:
    """One top-level ``{ ... }`` and what its header says it is."""

    start: int  # first byte of its header: where the unit begins
    open: int  # its `{`
    close: int  # its `}` (the last byte of the file when it is never closed)
    kind: str  # function | macro_body | block | data
    name: str


def top_level(text: bytes, cpp: bool = False) -> list[Block]:
    """The top-level blocks of a normalised text, in order (raises TooDeep beyond MAX_NESTING braces)."""
    spans = [(s, e) for s, e, _ in directives(text)]
    blocks: list[Block] = []
    containers = 0
    depth = 0
    item = 0  # where the current top-level item began
    opened = 0
    d = 0  # the next directive that may hold a token
    for m in _TOKENS.finditer(text):
        p = m.start()
        while d < len(spans) and spans[d][1] <= p:
            d += 1
        if d < len(spans) and spans[d][0] <= p:
            continue  # a brace in a #define
        c = text[p]
        if depth:
            if c == 0x7B:
                depth += 1
                if depth > MAX_NESTING:
                    raise TooDeep
            elif c == 0x7D:
                depth -= 1
                if not depth:
                    blocks.append(_block(text, spans, item, opened, p, cpp))
                    item = p + 1
        elif c == 0x3B:
            item = p + 1
        elif c == 0x7D:
            containers = max(0, containers - 1)  # a container's end (or a stray brace)
            item = p + 1
        elif _is_container(text[item:p], cpp):
            containers += 1
            if containers > MAX_NESTING:
                raise TooDeep
            item = p + 1
        else:
            depth, opened = 1, p
    if depth:
        blocks.append(_block(text, spans, item, opened, len(text) - 1, cpp))
    return blocks


def _is_container(header: bytes, cpp: bool) -> bool:
    return bool(_EXTERN.search(header)) or (cpp and bool(_CPP_CONTAINER.search(header)))


def _block(text: bytes, spans: list[tuple[int, int]], item: int, opened: int, close: int, cpp: bool) -> Block:
    """Read the header text[item:opened] of a block."""
    header = bytearray(text[item:opened])
    for s, e in spans:  # directive lines inside the header (`#ifdef X` / `int f(int a)` / `#else` ...)
        if s < opened and e > item:
            a, b = max(s, item) - item, min(e, opened) - item
            header[a:b] = b" " * (b - a)
    if cpp:
        access = _ACCESS.match(header)
        if access and access.end() > 0:
            header[: access.end()] = b" " * access.end()
    lead = len(header) - len(header.lstrip())
    start = item + lead
    line = text.count(b"\n", 0, start) + 1
    if lead == len(header):
        return Block(start, opened, close, "block", f"block@{line}")
    kind, name = _read(bytes(header), cpp)
    return Block(start, opened, close, kind, name if name is not None else f"block@{line}")


def _read(header: bytes, cpp: bool) -> tuple[str, str | None]:
    """What a block's header says: (kind, name); kind data for what is not a function."""
    if cpp:
        header = _without_initialisers(header)
    if _assigns(header):
        return "data", None
    i = len(header) - 1
    while True:  # trailing words after the parameter list: const, override, OS_WARN_RESULT...
        while i >= 0 and header[i] in _SPACE:
            i -= 1
        if i >= 0 and header[i] in _IDENT_CHARS:
            while i >= 0 and header[i] in _IDENT_CHARS:
                i -= 1
            continue
        break
    if i < 0 or header[i] != 0x29:
        return "data", None
    j = _opening(header, i)
    if j is None:
        return "data", None
    name = _name_before(header, j)
    if name is None and _before(header, j) == 0x29:  # `(*name(params))(void)`: returns a function pointer
        k = _last_non_space(header, j - 1)
        inner = _opening(header, k)
        if inner is not None:
            group = header[inner + 1 : k]
            calls = [m for m in _CALL.finditer(group) if m.group(1) not in _NOT_NAMES]
            name = calls[-1].group(1).decode("utf-8", "replace") if calls else None
    if name is None:
        return "data", None
    if cpp or not _MACRO_NAME.match(name):
        return "function", name
    first = _IDENT.search(header, j + 1)
    arg = first.group().decode("utf-8", "replace") if first and first.start() < i else None
    if arg and _SYSCALL.match(name):
        return "macro_body", ("compat_sys_" if name.startswith("COMPAT_") else "sys_") + arg
    return "macro_body", f"{name}({arg})" if arg else name


def _assigns(header: bytes) -> bool:
    """An ``=`` outside parentheses (an initialiser), not counting ``operator=``/``==``/``<=``..."""
    level = 0
    for k, c in enumerate(header):
        if c == 0x28:
            level += 1
        elif c == 0x29:
            level = max(0, level - 1)
        elif c == 0x3D and not level:
            around = header[max(0, k - 12) : k + 2]
            if not re.search(rb"operator\s*[=!<>+\-*/%&|^]*=|[=!<>]=|==", around):
                return True
    return False


def _without_initialisers(header: bytes) -> bytes:
    """A C++ constructor's header without its ``: member(x), ...`` list (cut at the first lone ``:`` after a
    ``)`` outside parentheses)."""
    level = 0
    seen_close = False
    for k, c in enumerate(header):
        if c == 0x28:
            level += 1
        elif c == 0x29:
            level = max(0, level - 1)
            seen_close = seen_close or level == 0
        elif c == 0x3A and not level and seen_close and b":" not in (header[k + 1 : k + 2], header[k - 1 : k]):
            return header[:k]
    return header


def _opening(header: bytes, close: int) -> int | None:
    """The ``(`` matching the ``)`` at close."""
    level = 0
    for k in range(close, -1, -1):
        c = header[k]
        if c == 0x29:
            level += 1
        elif c == 0x28:
            level -= 1
            if not level:
                return k
    return None


def _last_non_space(header: bytes, k: int) -> int:
    while k >= 0 and header[k] in _SPACE:
        k -= 1
    return k


def _before(header: bytes, j: int) -> int | None:
    k = _last_non_space(header, j - 1)
    return header[k] if k >= 0 else None


def _name_before(header: bytes, j: int) -> str | None:
    """The function name right before the parameter list at j: an identifier (C++: qualified, ``~X``,
    ``operator==``, ``operator()``), or None."""
    k = _last_non_space(header, j - 1)
    template = _template_open(header, k)
    if template is not None:  # f<T>(...)
        k = _last_non_space(header, template - 1)
    end = k + 1
    if k >= 1 and header[k - 1 : k + 1] == b"()":  # operator()
        k -= 2
    while k >= 0 and header[k] in _OPERATOR_CHARS:
        k -= 1
    operator = k + 1 < end
    k = _last_non_space(header, k) if operator else k
    e = k + 1
    while k >= 0 and header[k] in _IDENT_CHARS:
        k -= 1
    word = header[k + 1 : e]
    if not word or word[0] in b"0123456789" or (operator and word != b"operator"):
        return None
    if word in _NOT_NAMES:
        return None
    start = k + 1
    while True:  # qualification: A::B::name, A::~A
        q = _last_non_space(header, start - 1)
        if q >= 0 and header[q] == 0x7E:
            start, q = q, _last_non_space(header, q - 1)
        if q < 1 or header[q - 1 : q + 1] != b"::":
            break
        q = _last_non_space(header, q - 2)
        template = _template_open(header, q)
        if template is not None:  # X<T>::f
            q = _last_non_space(header, template - 1)
        r = q
        while r >= 0 and header[r] in _IDENT_CHARS:
            r -= 1
        if r == q:
            break
        start = r + 1
    return re.sub(rb"\s+", b"", header[start:end]).decode("utf-8", "replace")


def _template_open(header: bytes, close: int) -> int | None:
    """The ``<`` matching a ``>`` at close (template arguments), or None (also when close is not a ``>``)."""
    if close < 0 or header[close] != 0x3E:
        return None
    level = 0
    for k in range(close, -1, -1):
        c = header[k]
        if c == 0x3E:
            level += 1
        elif c == 0x3C:
            level -= 1
            if not level:
                return k
        elif c in b";{}":
            return None
    return None
