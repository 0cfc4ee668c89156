"""Where the functions of a C or C++ file are: its top-level brace blocks, and what each block's header says.

tree-sitter gives up on kernel files in ways that move or drop function boundaries (a body that swallows
the functions after it, a function cut at a loop macro, a definition left as loose tokens in an ERROR
node). Brace matching does not: on the normalised text (``kernelc.normalise``: comments and literals
blanked, one branch of each conditional inside a body, so braces balance) every top-level ``{ ... }``
is one block, and a function body is exactly one such block. So the splitter takes its boundaries from
here and tree-sitter only reads the file-level declarations.

Each block's header is the code between the previous top-level item (a ``;``, a block, a container's
brace, a ``#define`` or ``#include``) and its ``{``; conditional directives inside it are skipped, not
ends. The header says what the block is:

- ``... name(params) {`` (also ``name(params) const``, an attribute after it, ``(*name(params))(void)``,
  ``A::B::name``, ``operator==``, a C++ constructor's ``: member(x)`` list): the function ``name``;
- ``MACRO(first, ...) {``: a function defined by a macro, named as the kernel names it: ``sys_read`` for
  ``SYSCALL_DEFINE3(read, ...)``, ``compat_sys_x`` for ``COMPAT_SYSCALL_DEFINEn``, ``MACRO(first)`` else;
- anything with ``=``, or without a parameter list (``struct x {``, ``enum {``, ``x = {``): data (context);
- nothing at all: a stray block, audited as ``block@LINE``.

In C, a block whose braces the preprocessor left unbalanced (``#if V > 2`` opens a loop, ``#if V <= 2`` /
``#else`` closes it) ends at a ``}`` at column 0 followed by a header and a ``{`` at column 0, as ctags reads it:
no unit swallows the functions after it.

A macro expanded without a ``;`` on lines of its own before a function (``subsys_initcall(oom_init)`` /
``static void mark_oom_victim(...) {``, ``SHOW_LOCKED(bch_cached_dev)`` / ``STORE(__cached_dev) {``) is not part
of its header: the units are ``mark_oom_victim`` and ``STORE(__cached_dev)``, from their own lines. In C, a
``{`` inside the parentheses of a file-level macro call (a loop in ``TRACE_EVENT(name, ..., TP_fast_assign(...))``)
makes the whole call one unit, ``TRACE_EVENT(name)``, when it holds code (a ``;``), and data otherwise (a compound
literal in ``module_param_cb``).

``extern "C" {`` (and in C++ ``namespace`` and class bodies) are containers: the blocks inside are top level.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from k3lsp.units import kernelc
from k3lsp.units.kernelc import TooDeep, is_container

NEWLINE = b"\n"
_TOKENS = re.compile(rb"[{};]")
_BRACES = re.compile(rb"[{}]")
_PARENS = re.compile(rb"[()]")
# A function's end and the next one's head, at column 0 as kernel style writes them (blank lines, or comments
# blanked to spaces and backslashes, between): where the preprocessor left a body's braces unbalanced.
_COLUMN_ZERO_END = re.compile(rb"\n\}[ \t]*\n(?=(?:[ \t\\]*\n)*[A-Za-z_][^;{}]*\)[ \t\\]*\n\{)")
_CONDITIONALS = frozenset({b"if", b"ifdef", b"ifndef", b"elif", b"elifdef", b"elifndef", b"else", b"endif"})
_CLASS = re.compile(rb"\b(?:class|struct|union)\s+(?:[A-Z_][A-Z0-9_]*\s+)*([A-Za-z_]\w*)")
_IDENT = re.compile(rb"[A-Za-z_]\w*")
_KR_PARAMETERS = re.compile(rb"[A-Za-z_]\w*\s*\((\s*[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*)\)(?=\s*[A-Za-z_])")
_TYPE_OPERATORS = frozenset(b"typeof __typeof__ __typeof _Atomic decltype __declspec alignas _Alignas".split())
_TYPE_WORD = re.compile(rb"\b(?:struct|union|enum|class|typedef|namespace)\b")
_DECLARED = re.compile(rb"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$")
_CALL = re.compile(rb"([A-Za-z_]\w*)\s*\(")
_COMPARISON = re.compile(rb"operator\s*[=!<>+\-*/%&|^]*=|[=!<>]=|==")
_SYSCALL = re.compile(r"^(COMPAT_)?SYSCALL_DEFINE\d$")
_MACRO_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")  # SYSCALL_DEFINE3, BPF_CALL_2, DEFINE_SHOW_ATTRIBUTE
_IDENT_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SPACE = frozenset(b" \t\r\n\f\v\\")  # a backslash: what is left of a comment's line ends (kernelc)
_CPP_TRAILING = _IDENT_CHARS | frozenset(b"&*<>:,-")  # `const & noexcept`, `-> std::size_t`
_OPERATOR = re.compile(rb"\boperator\b\s*(\(\)|[^;{}()]{1,40}?)\s*$")
_ACCESS = re.compile(rb"\s*(?:(?:public|private|protected|signals|slots|Q_SLOTS)\s*:(?!:)\s*)+")
# Words that can stand before a parenthesis without being a function's name.
_NOT_NAMES = frozenset(
    b"if else for while do switch case return sizeof typeof __typeof__ __typeof alignof _Alignof "
    b"__alignof__ asm __asm__ __asm volatile __volatile__ goto default _Generic defined __attribute__ "
    b"static_assert _Static_assert _Atomic _Alignas".split()
)
_NOT_NAMES_CPP = _NOT_NAMES | frozenset(b"decltype noexcept throw new delete operator alignas".split())


@dataclass(frozen=True)
class Block:
    """One top-level ``{ ... }`` and what its header says it is."""

    start: int  # first byte of its header: where the unit begins
    open: int  # its `{`
    close: int  # its `}` (the last byte of the file when it is never closed)
    kind: str  # function | macro_body | block | data
    name: str


def top_level(normalised: kernelc.Normalised) -> list[Block]:
    """The top-level blocks of a normalised text, in order (raises TooDeep beyond kernelc.MAX_NESTING braces).
    A block whose header kernelc rewrote from ``SYSCALL_DEFINEn`` is a macro body; one whose header begins
    with an attribute kernelc blanked (``__init`` / ``int f(void)``) begins there."""
    text, cpp, syscalls, attributes = normalised.text, normalised.cpp, normalised.syscalls, normalised.attributes
    lines = normalised.directives
    spans = [(s, e) for s, e, _ in lines]
    ends = [e for _, e in spans]
    cut = None if cpp else _COLUMN_ZERO_END.search(text)  # the first column-0 function end after a block's `{`
    blocks: list[Block] = []
    containers: list[str] = []  # the classes open around this point ("" for other containers)
    recent: list[int] = []  # where the `;`-ended items since the last block began (K&R parameter declarations)
    item = 0  # where the current top-level item began
    flat = bytes(_without_directives(text, spans, 0, len(text)))  # braces and parentheses are counted in this
    call = 0  # where the current item began if a `;` inside parentheses does not end it
    paren = 0  # parentheses open since `call`: TRACE_EVENT(x, ..., TP_fast_assign(a; for_each_pipe(d, p) {
    d = 0  # the next directive that may hold a token
    pos = counted = 0
    while (m := _TOKENS.search(text, pos)) is not None:
        q = m.start()
        p = pos = q + 1
        while d < len(spans) and spans[d][1] <= q:
            if lines[d][2] not in _CONDITIONALS:
                item = max(item, spans[d][1])  # a #define or #include ends what came before; an #ifdef does not
                call = item if not paren else call
            d += 1
        if d < len(spans) and spans[d][0] <= q:
            continue  # a brace in a #define
        if not cpp:
            paren = max(0, paren + flat.count(b"(", counted, q) - flat.count(b")", counted, q))
            counted = q
        c = text[p - 1]
        if c == 0x3B:
            recent.append(item)
            item = p
            call = item if not paren else call
        elif c == 0x7D:
            if containers:  # a container's end (or a stray brace)
                containers.pop()
            item, recent, call, paren = p, [], p, 0
        elif is_container(text[item : p - 1], cpp):
            cls = _CLASS.search(text, item, p) if cpp else None
            containers.append(cls.group(1).decode("utf-8", "replace") if cls else "")
            if len(containers) > kernelc.MAX_NESTING:
                raise TooDeep
            item, recent, call, paren = p, [], p, 0
        elif paren and (end := _call_end(flat, q, paren)) is not None:
            blocks.append(_call(text, call, q, end))
            item = pos = call = counted = end + 1
            recent, paren = [], 0
        else:
            if not cpp and cut is not None and cut.start() < p:  # the next one (blocks only move forward)
                cut = _COLUMN_ZERO_END.search(text, p)
            # `}` / `int next(void)` / `{` at column 0 inside: the block ended there, whatever its braces say
            close = _close(flat, p - 1, len(text) - 1 if cut is None else cut.start() + 1)
            d = max(d, bisect.bisect_right(ends, close))  # the directives inside are passed
            block = _block(text, spans, item, p - 1, close, cpp, _scope(containers), recent)
            k = bisect.bisect_left(syscalls, block.start)
            if k < len(syscalls) and syscalls[k] < block.open:
                block = replace(block, kind="macro_body")
            k = bisect.bisect_left(attributes, item)
            if k < len(attributes) and attributes[k] < block.start:
                block = replace(block, start=attributes[k])
            blocks.append(block)
            item = pos = call = counted = close + 1
            recent, paren = [], 0
    return blocks


def _call_end(flat: bytes, opened: int, paren: int) -> int | None:
    """The ``)`` that closes the ``paren`` parentheses open before the ``{`` at ``opened`` (None if none does:
    a stray parenthesis, and the block is read as any other)."""
    for m in _PARENS.finditer(flat, opened):
        paren += 1 if m.group() == b"(" else -1
        if not paren:
            return m.start()
    return None


def _call(text: bytes, start: int, opened: int, end: int) -> Block:
    """A file-level macro call whose arguments hold a block (``TRACE_EVENT(name, ..., TP_fast_assign(...
    for_each_pipe(d, p) { ... } ...))``): one unit ``TRACE_EVENT(name)`` over the whole call, when there is
    code in it (a `;`); data (``module_param_cb(x, &(struct ops){ .set = f }, ...)``) otherwise."""
    lead = len(text[start:opened]) - len(text[start:opened].lstrip(bytes(_SPACE)))
    name = _IDENT.match(text, start + lead)
    arg = _IDENT.search(text, name.end(), opened) if name is not None else None
    if name is None or name.group() in _NOT_NAMES or b";" not in text[start:end]:  # `for (({ ...; }), i = 0; ...)`
        return Block(start + lead, opened, end, "data", "")
    called = name.group().decode("utf-8", "replace")
    return Block(start + lead, opened, end, "macro_body", f"{called}({arg.group().decode()})" if arg else called)


def _close(flat: bytes, opened: int, limit: int) -> int:
    """The `}` that closes the block opened at `opened` (``limit`` if none does before it: the file's last byte,
    or a column-0 function end). ``flat`` is the text without its directive lines: a brace in a #define does not
    count. One step per `}` (a find and a count, in C), the `{` before it counted at once."""
    depth, at = 0, opened
    while (q := flat.find(b"}", at, limit + 1)) >= 0:
        depth += flat.count(b"{", at, q)  # the deepest point since the last `}`
        if depth > kernelc.MAX_NESTING:
            raise TooDeep
        depth -= 1
        if not depth:
            return q
        at = q + 1
    return limit


def _declares(declarations: bytes, parameters: bytes) -> bool:
    """Whether what follows a K&R parameter list (`struct sadb_msg *base; int len;`) declares only those
    parameters, ending at the body."""
    names = set(_IDENT.findall(parameters))
    *parts, rest = declarations.split(b";")
    for part in parts:
        for declarator in part.split(b","):
            last = _DECLARED.search(declarator)
            if last is None or last.group(1) not in names or b"=" in declarator or b"(" in declarator:
                return False
    return bool(parts) and not rest.strip(bytes(_SPACE))


def _without_directives(text: bytes, spans: list[tuple[int, int]], start: int, end: int) -> bytearray:
    """text[start:end] with its directive lines blanked (`#ifdef X` / `int f(int a)` / `#else` / ... / `{`)."""
    out = bytearray(text[start:end])
    k = max(0, bisect.bisect_right(spans, (start,)) - 1)
    while k < len(spans) and spans[k][0] < end:
        a, b = max(spans[k][0], start) - start, min(spans[k][1], end) - start
        if b > a:
            out[a:b] = b" " * (b - a)
        k += 1
    return out


def _scope(containers: list[str]) -> str:
    """The qualification of a method defined inside class bodies: ``Outer::Inner::``."""
    return "".join(f"{c}::" for c in containers if c)


def _block(
    text: bytes,
    spans: list[tuple[int, int]],
    item: int,
    opened: int,
    close: int,
    cpp: bool,
    scope: str,
    recent: list[int],
) -> Block:
    """Read the header text[item:opened] of a block; ``recent``: where the `;`-ended items before it began."""
    header = _without_directives(text, spans, item, opened)
    if not cpp and b"(" not in header:
        for start in reversed(recent[-8:]):  # `int f(a, b)` / `int a; char *b;` / `{`: a K&R definition
            candidate = _without_directives(text, spans, start, opened)
            params = _KR_PARAMETERS.search(candidate, 0, max(0, candidate.find(b";")))
            if params is not None and _declares(candidate[params.end() :], params.group(1)):
                item, header = start, candidate[: params.end()]
                break
    if cpp:
        access = _ACCESS.match(header)
        if access and access.end() > 0:
            header[: access.end()] = b" " * access.end()
    lead = len(header) - len(header.lstrip(bytes(_SPACE)))
    if not cpp:
        expanded = _after_expansion(header, lead)
        header[lead:expanded] = b" " * (expanded - lead)
        lead = expanded
    start = item + lead
    kind, name = _read(bytes(header), cpp) if lead < len(header) else ("block", None)
    if name is None and kind != "data":  # rare: counting the lines before it is fine
        return Block(start, opened, close, "block", f"block@{text.count(NEWLINE, 0, start) + 1}")
    return Block(start, opened, close, kind, scope + (name or ""))


def _after_expansion(header: bytearray, lead: int) -> int:
    """Where a header begins that starts with a macro expanded without a `;`, on lines of its own, before what
    heads the function (``subsys_initcall(oom_init)`` / ``static void mark_oom_victim(...)``, bcache's
    ``SHOW_LOCKED(bch_cached_dev)`` / ``STORE(__cached_dev)``): after that call; ``lead`` for any other header."""
    word = _IDENT.match(header, lead)
    i = _first_non_space(header, word.end()) if word is not None else len(header)
    if i >= len(header) or header[i] != 0x28 or word.group() in _NOT_NAMES:
        return lead
    close = _closing(header, i)
    rest = _first_non_space(header, close + 1) if close is not None else len(header)
    if rest >= len(header) or header[rest] not in _IDENT_CHARS or NEWLINE not in header[close:rest]:
        return lead
    return rest if _read(bytes(header[rest:]), False)[0] != "data" else lead


def _first_non_space(header: bytearray, k: int) -> int:
    while k < len(header) and header[k] in _SPACE:
        k += 1
    return k


def _closing(header: bytearray, opened: int) -> int | None:
    """The ``)`` matching the ``(`` at opened, or None."""
    level = 0
    for k in range(opened, len(header)):
        level += (header[k] == 0x28) - (header[k] == 0x29)
        if not level:
            return k
    return None


def _read(header: bytes, cpp: bool) -> tuple[str, str | None]:
    """What a block's header says: (kind, name); kind data for what is not a function."""
    if cpp:
        header = _without_initialisers(header)
    if _assigns(header, cpp):
        return "data", None
    trailing = _CPP_TRAILING if cpp else _IDENT_CHARS
    i = len(header) - 1
    while i >= 0 and (header[i] in _SPACE or header[i] in trailing):  # const, override, & noexcept, __unused
        i -= 1
    if i < 0 or header[i] != 0x29 or _TYPE_WORD.search(header, i):  # `MACRO()` / `struct x {`: a type
        return "data", None
    j = _opening(header, i)
    while j is not None and _trailing_attribute(header, j):  # `f(int n) __xnu_precondition(n, "x") {`
        i = _last_non_space(header, _word_start(header, _last_non_space(header, j - 1)) - 1)
        j = _opening(header, i)
    if j is None:
        return "data", None
    name = _name_before(header, j, cpp)
    if name is None and _before(header, j) == 0x29:
        name = _inner_name(header, j, cpp)
    if name is None:
        return "data", None
    if cpp or not _MACRO_NAME.match(name) or header[:j].strip(bytes(_SPACE)) != name.encode():
        return "function", name  # `int\nVFS_MOUNT(mount_t mp, ...)`: a return type, so a function of that name
    first = _IDENT.search(header, j + 1)
    arg = first.group().decode("utf-8", "replace") if first and first.start() < i else None
    if arg and _SYSCALL.match(name):
        return "macro_body", ("compat_sys_" if name.startswith("COMPAT_") else "sys_") + arg
    return "macro_body", f"{name}({arg})" if arg else name


def _word_start(header: bytes, k: int) -> int:
    """The start of the identifier ending at k."""
    while k >= 0 and header[k] in _IDENT_CHARS:
        k -= 1
    return k + 1


def _trailing_attribute(header: bytes, j: int) -> bool:
    """Whether the group at j is an attribute macro's arguments after the parameter list: ``) NAME(args)``
    with an attribute's name (``__x`` or upper case), not after a type (``__typeof__(T) name(args)``)."""
    k = _last_non_space(header, j - 1)
    if k < 0 or header[k] not in _IDENT_CHARS:
        return False
    start = _word_start(header, k)
    word = header[start : k + 1]
    if not (word.startswith(b"__") or _MACRO_NAME.match(word.decode("latin-1"))):
        return False
    close = _last_non_space(header, start - 1)
    if close < 0 or header[close] != 0x29:
        return False
    opening = _opening(header, close)
    before = _last_non_space(header, opening - 1) if opening is not None else -1
    return before < 0 or header[_word_start(header, before) : before + 1] not in _TYPE_OPERATORS


def _inner_name(header: bytes, j: int, cpp: bool) -> str | None:
    """The name in the group before a parameter list: ``(*name(params))(void)`` (returns a function
    pointer), ``(name)(params)`` (kept from macro expansion), ``NAME(args)(params)`` (a macro makes it)."""
    k = _last_non_space(header, j - 1)
    inner = _opening(header, k)
    if inner is None:
        return None
    group = header[inner + 1 : k]
    calls = [m.group(1) for m in _CALL.finditer(group) if m.group(1) not in _not_names(cpp)]
    alone = _IDENT.fullmatch(group.strip(bytes(_SPACE)))
    word = calls[-1] if calls else alone.group() if alone else None
    if word is None:
        return _name_before(header, inner, cpp)
    return word.decode("utf-8", "replace")


def _outside(header: bytes, cpp: bool) -> Iterator[int]:
    """Positions of the header's bytes outside parentheses (and in C++ outside template brackets), with the
    ``)`` that closes a group at that level."""
    level = angle = 0
    for k, c in enumerate(header):
        if c == 0x28:
            if not level and not angle:
                yield k
            level += 1
        elif c == 0x29:
            level = max(0, level - 1)
            if not level and not angle:
                yield k
        elif level:
            continue
        elif cpp and c == 0x3C and header[k + 1 : k + 2] not in (b"<", b"=") and header[k - 1 : k] != b"<":
            angle += 1
        elif cpp and c == 0x3E and angle and header[k - 1 : k] != b"-":
            angle -= 1
        elif not angle:
            yield k


def _assigns(header: bytes, cpp: bool) -> bool:
    """An ``=`` outside parentheses (an initialiser), not counting ``operator=``/``==``/``<=``..."""
    return b"=" in header and any(
        header[k] == 0x3D and not _COMPARISON.search(header[max(0, k - 12) : k + 2]) for k in _outside(header, cpp)
    )


def _without_initialisers(header: bytes) -> bytes:
    """A C++ constructor's header without its ``: member(x), ...`` list (cut at the first lone ``:`` after a
    ``)``, outside parentheses and template brackets)."""
    closed = False
    for k in _outside(header, True):
        c = header[k]
        closed = closed or c == 0x29
        if c == 0x3A and closed and b":" not in (header[k + 1 : k + 2], header[k - 1 : k]):
            return header[:k]
    return header


def _opening(header: bytes, close: int, pair: bytes = b"()", stops: bytes = b"") -> int | None:
    """The opening byte of ``pair`` matching its closing one at close (None if there is none before a byte of
    ``stops``)."""
    level = 0
    for k in range(close, -1, -1):
        c = header[k]
        if c == pair[1]:
            level += 1
        elif c == pair[0]:
            level -= 1
            if not level:
                return k
        elif c in stops:
            return None
    return None


def _last_non_space(header: bytes, k: int) -> int:
    while k >= 0 and header[k] in _SPACE:
        k -= 1
    return k


def _before(header: bytes, j: int) -> int | None:
    k = _last_non_space(header, j - 1)
    return header[k] if k >= 0 else None


def _name_before(header: bytes, j: int, cpp: bool) -> str | None:
    """The function name right before the parameter list at j: an identifier (C++: qualified, ``~X``,
    ``operator==``, ``operator new``, ``operator void*``, ``f<T>``), or None."""
    operator = _OPERATOR.search(header, max(0, j - 60), j) if cpp else None
    if operator is not None:
        tail = re.sub(rb"\s+", b" ", operator.group(1)).strip()
        k = operator.start() - 1
        word = b"operator" + (b" " if tail[:1].isalnum() else b"") + tail
        start = k + 1
    else:
        k = _last_non_space(header, j - 1)
        template = _template_open(header, k)
        if template is not None:  # f<T>(...)
            k = _last_non_space(header, template - 1)
        e = k + 1
        while k >= 0 and header[k] in _IDENT_CHARS:
            k -= 1
        word = header[k + 1 : e]
        if not word or word[0] in b"0123456789" or word in _not_names(cpp):
            return None
        start = k + 1
    prefix = b""
    while cpp:  # qualification: A::B::name, A::~A
        q = _last_non_space(header, start - 1)
        if q >= 0 and header[q] == 0x7E:
            start, prefix, q = q, b"~", _last_non_space(header, q - 1)
        if q < 1 or header[q - 1 : q + 1] != b"::":
            break
        q = _last_non_space(header, q - 2)
        template = _template_open(header, q)
        end = q + 1
        if template is not None:  # X<T>::f
            q = _last_non_space(header, template - 1)
        r = q
        while r >= 0 and header[r] in _IDENT_CHARS:
            r -= 1
        if r == q:
            break
        prefix = re.sub(rb"\s+", b"", header[r + 1 : end]) + b"::" + prefix
        start = r + 1
    return (prefix + word).decode("utf-8", "replace")


def _not_names(cpp: bool) -> frozenset[bytes]:
    return _NOT_NAMES_CPP if cpp else _NOT_NAMES


def _template_open(header: bytes, close: int) -> int | None:
    """The ``<`` matching a ``>`` at close (template arguments), or None (also when close is not a ``>``)."""
    if close < 0 or header[close] != 0x3E:
        return None
    return _opening(header, close, b"<>", b";{}")
