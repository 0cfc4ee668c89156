"""C source -> audit units: one per function, plus the file-level context each one needs.

The model audits functions, not files (prefilling a whole 60k-token kernel file takes minutes on the pair,
one changed function seconds; docs/architecture.md): a unit is what is sent, cached and
re-audited, so its boundaries must be stable and its key must change exactly when what the model would
see changes. The invariant: every line inside a function definition belongs to exactly one unit, named
after its function. Kernel code is written in macros tree-sitter-c does not know, so a split is three steps:

1. ``kernelc.normalise``: a length-preserving rewrite of the kernel idioms (loop, attribute and statement
   macros, conditional directives inside bodies and parameter lists; the table is the ``kernelMacros``
   setting), so every byte keeps its offset and every line its number;
2. ``blocks.top_level``: the functions are the top-level brace blocks of that text, named by their headers
   (``SYSCALL_DEFINE3(read, ...)`` is ``sys_read``; a stray block is ``block@LINE``), and the ``#define``s
   that hold functions (``templates``: one unit each, ``show_##reg``, with the lines expanding it as context);
3. tree-sitter (C, or C++ for a file that ``cxx.is_cpp`` says is C++) reads the rest: the declarations
   that are context (the function bodies skipped: they are never context, and are most of the bytes).

Units and context are always cut from the original bytes: the normalised text only decides where things
are. Units that share a line are merged ("a+b"), so units never overlap.

Line numbers here are 0-based file lines, ``end_line`` inclusive (tree-sitter rows, LSP lines). A unit's
text is always whole lines, so line ``k`` (1-based) of the unit is file line ``start_line + k - 1``; that
is the coordinate system of the model's findings.

Everything that is not a function (includes, macros, types, prototypes, globals, ops-struct initialisers)
is context. A unit's context holds only the items its body names (transitively for macros and types),
capped, in file order: small, deterministic, and part of the unit's content address ``key``.

What is sent with a unit is its file's context (``sent_context``): the union of all its units' contexts, in
file order, the same text for every unit of the file. The daemon caches the prompt up to the end of that
context once per file, so a whole-file audit reads the file's declarations once and then a short tail per
function, and a re-audit of one edited function reads only its tail. A file whose union is larger than
MAX_FILE_CONTEXT_CHARS (a 9 MB amalgamation) sends each unit its own context instead.

A file whose structure is beyond the splitter's limits (``#if`` or brace nesting deeper than
``kernelc.MAX_NESTING``: a hostile repository can nest 1,000 levels in 13 KB) is not refused: it is split
into windows of ``WINDOW_LINES`` lines without context (kind ``lines``), so it is still audited, and
:func:`fallback_note` says so.

Every step is linear in the file: a 1 MB file splits in a fraction of a second (bench/kernel_scale.py).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import tree_sitter_c
import tree_sitter_cpp
from tree_sitter import Language, Node, Parser, Point, Range

from k3lsp.units import blocks, kernelc, templates
from k3lsp.units.kernelc import DEFAULT_MACROS, Macros
from k3lsp.wire.address import unit_key

C_LANGUAGE = Language(tree_sitter_c.language())
CPP_LANGUAGE = Language(tree_sitter_cpp.language())

MAX_CONTEXT_CHARS = 8000  # ~2k tokens: a unit's context must stay well below the unit itself on average
MAX_FILE_CONTEXT_CHARS = 32_000  # ~8k tokens read once per file: beyond, each unit gets its own context
MAX_ITEM_LINES = 40  # a 500-line table initialiser is not worth its tokens; its head says what it is
MAX_INCLUDES = 64  # the first includes say which APIs a file uses; hundreds in every unit would be quadratic
MAX_REFERENCES = 4  # top-level lines naming the unit (ops structs, module_init) that show how it is reached
TRANSITIVE_DEPTH = 2  # a macro's macros, a struct's member types; deeper chains are rarely needed
_MIN_ITEM_CHARS = 24  # below this much budget nothing useful fits: stop looking (big files fill the budget)
WINDOW_LINES = 200  # a file beyond the splitter's limits is audited in windows of this many lines
WINDOW_KIND = "lines"

IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_DECLARATOR_WRAPPERS = (
    "function_declarator",
    "pointer_declarator",
    "attributed_declarator",
    "parenthesized_declarator",
)

# Nodes whose children are top-level code: walked through, never context themselves.
_CONTAINERS = frozenset(
    {
        "translation_unit",
        "preproc_if",
        "preproc_ifdef",
        "preproc_else",
        "preproc_elif",
        "preproc_elifdef",
        "ERROR",
        "linkage_specification",
        "declaration_list",
        "namespace_definition",
    }
)
_SKIP = frozenset({"comment", ";", "#if", "#ifdef", "#ifndef", "#else", "#elif", "#endif", "identifier"})
_TAGGED = frozenset({"struct_specifier", "union_specifier", "enum_specifier", "class_specifier"})
_TYPES = _TAGGED | {"type_definition"}
_CPP_TYPES = frozenset({"class_specifier", "template_declaration", "alias_declaration", "concept_definition"})


@dataclass(frozen=True)
class ContextItem:
    """One file-level thing a unit may need: an include, macro, type, prototype or global."""

    kind: str  # include | macro | type | prototype | signature | global | reference
    names: tuple[str, ...]  # the identifiers it defines (empty for includes and references)
    start_line: int
    end_line: int
    text: str
    idents: frozenset[bytes] = field(repr=False)  # the identifiers it mentions (for transitive deps)


@dataclass(frozen=True)
class Unit:
    """One audit unit: a function (or macro body) of a file, with its context and content address."""

    name: str
    # function | macro_body | macro_template (functions written in a #define: units/templates.py) | block (a
    # brace block whose header names no function) | lines
    kind: str
    start_line: int  # 0-based file line of the unit's first line
    end_line: int  # 0-based file line of its last line, inclusive
    text: str  # the whole lines start_line..end_line, joined by "\n", without a final newline
    context: str  # the context items in file order (adjacent ones on adjacent lines, others a blank line apart)
    key: str  # sha256 of (text, context): the cache address
    file_context: str = ""  # the union of its file's unit contexts ("" when over MAX_FILE_CONTEXT_CHARS)

    @property
    def sent_context(self) -> str:
        """The context an audit sends: the file's shared one (one cached prefix per file), else the unit's own."""
        return self.file_context or self.context

    @property
    def line_count(self) -> int:
        return self.end_line - self.start_line + 1

    def file_line(self, unit_line: int) -> int:
        """The 0-based file line of a 1-based unit line (the model's coordinates)."""
        return self.start_line + unit_line - 1


@dataclass(frozen=True)
class ParsedFile:
    """A file split into units plus its context items: what sandbox.find_definition searches."""

    units: list[Unit]
    items: list[ContextItem]  # in file order; functions defined here appear as `signature` items


@dataclass
class _Span:
    """A unit before merging: a line range and the name/kind it gets."""

    name: str
    kind: str
    start: int
    end: int
    header: tuple[int, int] | None = None  # bytes of a function's header, for its prototype


@functools.lru_cache(maxsize=16)  # a few open documents; each entry holds its text
def split(source: str | bytes, macros: Macros = DEFAULT_MACROS) -> tuple[Unit, ...]:
    """The audit units of a C or C++ file, in file order; ``macros`` is the kernel macro table (the
    ``kernelMacros`` setting added to the defaults).

    Memoised on the text and the table: a save with nothing changed, or several features asking for the
    units of the same document version, cost a hash of the text instead of a parse.
    """
    return tuple(parse(source, macros).units)


def parse(source: str | bytes, macros: Macros = DEFAULT_MACROS) -> ParsedFile:
    """Parse a file into units and context items; line windows when it is beyond the splitter's limits."""
    data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    try:
        return _parse(data, macros)
    except (kernelc.TooDeep, RecursionError):
        return ParsedFile(_windows(data), [])


def fallback_note(units: tuple[Unit, ...] | list[Unit]) -> str | None:
    """What to tell the user when a file was split into line windows instead of functions; None otherwise."""
    if not units or units[0].kind != WINDOW_KIND:
        return None
    return (
        f"nested deeper than the C splitter follows (over {kernelc.MAX_NESTING} levels of #if or braces): audited as "
        f"{len(units)} windows of up to {WINDOW_LINES} lines (line windows, without file context)"
    )


def _windows(data: bytes) -> list[Unit]:
    """The whole lines of a file in consecutive windows of WINDOW_LINES lines (no trailing empty line)."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    out = []
    for start in range(0, len(lines), WINDOW_LINES):
        end = min(start + WINDOW_LINES, len(lines)) - 1
        text = b"\n".join(lines[start : end + 1]).decode("utf-8", "replace")
        out.append(Unit(f"lines {start + 1}-{end + 1}", WINDOW_KIND, start, end, text, "", unit_key(text, "")))
    return out


def _parse(data: bytes, macros: Macros) -> ParsedFile:
    normalised = kernelc.normalise(data, macros)
    found, expansions = templates.with_templates(
        normalised, [b for b in blocks.top_level(normalised) if b.kind != "data"]
    )
    spans = _merge(list(_spans(found, data)))
    parser = Parser(CPP_LANGUAGE if normalised.cpp else C_LANGUAGE)
    parser.included_ranges = _outside_bodies(normalised.text, found)
    tree = parser.parse(normalised.text)
    items = _context(tree.root_node, data, [(b.start, b.close + 1) for b in found], normalised.cpp)
    items += _signatures(spans, items, data)
    lines = data.split(b"\n")
    items += _expansions(expansions, data, lines)
    items.sort(key=lambda item: item.start_line)
    index = _Index.build(items)
    bodies = [b"\n".join(lines[s.start : s.end + 1]) for s in spans]
    chosen = [_chosen(_reached_by(s, body), body, index) for s, body in zip(spans, bodies, strict=True)]
    shared = _joined(items, set().union(*chosen))
    shared = shared if len(shared) <= MAX_FILE_CONTEXT_CHARS else ""
    units = []
    for s, body, picked in zip(spans, bodies, chosen, strict=True):
        context = _joined(items, picked)
        text = body.decode("utf-8", "replace")
        units.append(Unit(s.name, s.kind, s.start, s.end, text, context, unit_key(text, context), shared))
    return ParsedFile(units, items)


# --- the units ----------------------------------------------------------------------------------------------


def _spans(found: list[blocks.Block], data: bytes) -> Iterator[_Span]:
    """The line spans of the function blocks (rows counted once, in order: linear in the file)."""
    row, at = 0, 0
    for b in found:
        row += data.count(b"\n", at, b.start)
        start = row
        row += data.count(b"\n", b.start, b.close)
        at = b.close
        header = (b.start, b.open) if b.kind == "function" else None
        yield _Span(b.name, b.kind, start, row, header)


def _merge(spans: list[_Span]) -> list[_Span]:
    """Merge spans (in file order) that share a line, so each line belongs to at most one unit."""
    merged: list[_Span] = []
    for s in spans:
        last = merged[-1] if merged else None
        if last is None or s.start > last.end:
            merged.append(_Span(s.name, s.kind, s.start, s.end, s.header))
        else:  # `int a(void) {...} int b(void) {...}` on one line: one unit "a+b"
            last.name, last.end, last.header = f"{last.name}+{s.name}", max(last.end, s.end), None
            if s.kind == "function":
                last.kind = "function"
    return merged


_BODY_KINDS = frozenset({"function", "macro_body", "block"})


def _outside_bodies(text: bytes, found: list[blocks.Block]) -> list[Range]:
    """What tree-sitter parses: all but what is between the braces of each function block, whose lexer skips
    the rest (the positions it reports are the text's). Only the file-level declarations are read from the
    parse (the blocks come from ``blocks``), so the bodies, most of a kernel file's bytes, need not be parsed:
    the whole Linux tree's parse took a third of its split. A template's ``#define`` and a macro call around a
    block (``TRACE_EVENT(...)``) are parsed whole."""
    bounds = [0]
    for b in found:
        if b.kind in _BODY_KINDS and text[b.open] == 0x7B and text[b.close] == 0x7D:
            bounds += [b.open + 1, b.close]
    bounds.append(len(text))
    points, row, at = [], 0, 0
    for b in bounds:  # rows counted once, in order: linear in the file
        row += text.count(b"\n", at, b)
        at = b
        points.append(Point(row, b - text.rfind(b"\n", 0, b) - 1))
    return [Range(points[i], points[i + 1], bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]


def _signatures(spans: list[_Span], items: list[ContextItem], data: bytes) -> list[ContextItem]:
    """Prototypes of the functions defined in the file, for those without a declared prototype."""
    declared = {name for item in items if item.kind == "prototype" for name in item.names}
    out = []
    for s in spans:
        if s.header is None or s.name in declared:
            continue
        header = data[s.header[0] : s.header[1]]
        text = " ".join(header.decode("utf-8", "replace").split()) + ";"
        out.append(ContextItem("signature", (s.name,), s.start, s.start, text, frozenset(IDENT.findall(header))))
    return out


def _expansions(expansions: list[templates.Expansion], data: bytes, lines: list[bytes]) -> list[ContextItem]:
    """The lines that expand a macro template (``show_in_reg(in_min)``): references to it, as context."""
    if not expansions:
        return []
    starts = list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    out = []
    for x in expansions:
        raw = data[x.start : x.end]
        first = bisect.bisect_right(starts, x.start) - 1
        last = bisect.bisect_right(starts, x.end - 1) - 1
        out.append(
            ContextItem("reference", (), first, last, raw.decode("utf-8", "replace"), frozenset(IDENT.findall(raw)))
        )
    return out


def _reached_by(span: _Span, body: bytes) -> str:
    """The name whose mentions show how a unit is reached: its function's, or a template's macro."""
    if span.kind == templates.KIND:
        return templates.macro_name(body) or span.name
    return span.name


def _context(root: Node, data: bytes, taken: list[tuple[int, int]], cpp: bool) -> list[ContextItem]:
    """The file-level declarations: the top-level nodes outside the function blocks (`taken`, byte spans in
    order). Containers (#if groups, ERROR nodes, extern "C", namespaces) are walked through, without
    recursion; a node inside a function is skipped, and so is one that straddles a function (a misparse),
    except a C++ class whose inline methods are units (the class is still context)."""
    starts = [s for s, _ in taken]
    items: list[ContextItem] = []
    stack: list[Iterator[Node]] = [iter(root.children)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        s, e = node.start_byte, node.end_byte
        k = bisect.bisect_right(starts, s) - 1
        if k >= 0 and taken[k][1] >= e:
            continue  # inside a function
        overlaps = (k >= 0 and taken[k][1] > s) or (k + 1 < len(taken) and taken[k + 1][0] < e)
        kind = node.type
        if kind in _CONTAINERS:
            if len(stack) > kernelc.MAX_NESTING:
                raise kernelc.TooDeep
            stack.append(iter(node.children))
        elif (not overlaps or (cpp and kind in _CPP_TYPES)) and kind not in _SKIP:
            item = _context_item(node, data)
            if item is not None:
                items.append(item)
    return items


def _rows(node: Node) -> tuple[int, int]:
    """A node's first and last line; a node ending at column 0 (a preprocessor line) ends a line earlier."""
    start, end = node.start_point.row, node.end_point.row
    if end > start and node.end_point.column == 0:
        end -= 1
    return start, end


def _declarator_name(node: Node | None) -> Node | None:
    """The name a function declarator chain declares: through pointers, parentheses, attributes and the
    function declarators of `static void (*f(int))(void)`. None when no function declarator is on the way."""
    function = False
    while node is not None:
        kind = node.type
        if kind in ("identifier", "field_identifier"):
            return node if function else None
        if kind not in _DECLARATOR_WRAPPERS:
            return None
        function = function or kind == "function_declarator"
        node = node.child_by_field_name("declarator") or next(
            (c for c in node.named_children if c.type not in ("ms_pointer_modifier", "type_qualifier")), None
        )
    return None


def _first_identifier(node: Node, data: bytes) -> str | None:
    match = IDENT.search(data, node.start_byte, node.end_byte)
    return match.group().decode() if match else None


def _text(node: Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


# --- context ----------------------------------------------------------------------------------------------


def _context_item(node: Node, data: bytes) -> ContextItem | None:
    kind = node.type
    if kind == "preproc_include":
        item_kind, names = "include", ()
    elif kind in ("preproc_def", "preproc_function_def"):
        name = node.child_by_field_name("name")
        item_kind, names = "macro", (_text(name, data),) if name is not None else ()
    elif kind in _TYPES or kind in _CPP_TYPES:
        item_kind, names = "type", _defined_names(node, data)
    elif kind == "declaration":
        names = _defined_names(node, data)
        is_proto = any(d.type == "function_declarator" for d in _declarators(node))
        item_kind = "prototype" if is_proto else "global"
    elif kind == "expression_statement":
        item_kind, names = "reference", ()  # module_init(f); EXPORT_SYMBOL(f);
    elif kind == "function_definition":  # not a unit: `static SQLITE_WSD struct s {...} x = {...};` misread
        declarator = node.child_by_field_name("declarator")
        item_kind, names = "global", (_text(declarator, data),) if declarator is not None else ()
    else:
        return None
    start, end = _rows(node)
    raw = data[node.start_byte : node.end_byte]
    if kind in _TAGGED:
        raw += b";"  # tree-sitter leaves the `;` of `struct x {...};` as a sibling
    text = _cap_lines(raw.decode("utf-8", "replace").rstrip())
    return ContextItem(item_kind, names, start, end, text, frozenset(IDENT.findall(raw)))


def _declarators(node: Node) -> Iterable[Node]:
    """The declarators of a declaration, unwrapped from initialisers and pointers."""
    for d in node.children_by_field_name("declarator"):
        while d.type in ("init_declarator", "pointer_declarator", "attributed_declarator", "array_declarator"):
            inner = d.child_by_field_name("declarator")
            if inner is None:
                break
            d = inner
        yield d


def _defined_names(node: Node, data: bytes) -> tuple[str, ...]:
    """Names a type or declaration defines: tags, typedef names, enumerators, variables, functions."""
    names: list[str] = []
    for spec in [node, *(c for c in node.named_children if c.type.endswith("_specifier"))]:
        body = spec.child_by_field_name("body")
        if spec.type in _TAGGED and body is not None:
            tag = spec.child_by_field_name("name")  # `struct x {...}` defines x; `struct x y;` does not
            if tag is not None:
                names.append(_text(tag, data))
            if spec.type == "enum_specifier":
                names += [
                    _text(e.child_by_field_name("name"), data)
                    for e in body.named_children
                    if e.type == "enumerator" and e.child_by_field_name("name") is not None
                ]
    for d in _declarators(node):
        if d.type == "function_declarator":
            named = _declarator_name(d)
            if named is not None:
                names.append(_text(named, data))
        elif d.type in ("identifier", "type_identifier", "field_identifier"):
            names.append(_text(d, data))
        elif d.type == "parenthesized_declarator":  # static LIST_HEAD(name); DEFINE_MUTEX(name);
            first = _first_identifier(d, data)
            if first:
                names.append(first)
    return tuple(dict.fromkeys(names))


def _cap_lines(text: str) -> str:
    lines = text.split("\n")
    if len(lines) <= MAX_ITEM_LINES:
        return text
    return "\n".join([*lines[:MAX_ITEM_LINES], f"\t/* ... k3lsp: {len(lines) - MAX_ITEM_LINES} more lines */"])


@dataclass(frozen=True)
class _Index:
    """Lookups over a file's context items, built once per file so each unit's context is cheap."""

    items: list[ContextItem]
    by_name: dict[bytes, list[int]]  # defined name -> items defining it
    mentions: dict[bytes, list[int]]  # identifier -> references/globals mentioning it (who reaches a unit)
    includes: list[int]  # the first MAX_INCLUDES includes
    include_costs: list[int]  # what the first k of them cost together, for each k

    @classmethod
    def build(cls, items: list[ContextItem]) -> _Index:
        by_name: dict[bytes, list[int]] = {}
        mentions: dict[bytes, list[int]] = {}
        for i, item in enumerate(items):
            for name in item.names:
                by_name.setdefault(name.encode(), []).append(i)
            if item.kind in ("reference", "global"):
                for ident in item.idents:
                    mentions.setdefault(ident, []).append(i)
        includes = [i for i, item in enumerate(items) if item.kind == "include"][:MAX_INCLUDES]
        costs = list(itertools.accumulate(len(items[i].text) + 2 for i in includes))
        return cls(items, by_name, mentions, includes, costs)


def _chosen(name: str, body: bytes, index: _Index) -> set[int]:
    """The context items of one unit, taken in priority order while they fit the budget.

    Priority: what the body names directly, the includes, what those items name (transitively), then
    the top-level lines that name the unit (ops structs, module_init): how the function is reached.
    """
    items = index.items
    own = name.encode()
    chosen: set[int] = set()
    budget = MAX_CONTEXT_CHARS

    def take(i: int) -> bool:
        nonlocal budget
        cost = len(items[i].text) + 2
        if i in chosen or cost > budget:
            return False
        chosen.add(i)
        budget -= cost
        return True

    seen = (set(IDENT.findall(body)) | set(IDENT.findall(own))) - {own, own.rsplit(b"::", 1)[-1]}  # C++: A::f
    names = index.by_name.keys()
    frontier = sorted(seen & names)  # the identifiers that name an item (a set intersection, in C)
    for depth in range(TRANSITIVE_DEPTH + 1):
        nxt: set[bytes] = set()
        for ident in frontier:
            if budget < _MIN_ITEM_CHARS:
                break
            for i in index.by_name.get(ident, ()):
                if take(i) and items[i].kind in ("macro", "type", "global"):
                    nxt |= items[i].idents
        if depth == 0:  # the first includes that fit (prefix sums: every unit of a file does this)
            k = bisect.bisect_right(index.include_costs, budget)
            chosen.update(index.includes[:k])
            budget -= index.include_costs[k - 1] if k else 0
        frontier = sorted((nxt - seen) & names)
        seen |= nxt
    for i in index.mentions.get(own, ())[:MAX_REFERENCES]:
        take(i)
    return chosen


def _joined(items: list[ContextItem], chosen: set[int]) -> str:
    """Context items in file order: adjacent ones (a block of #includes) together, others a blank line apart."""
    parts: list[str] = []
    prev_end = -2
    for i in sorted(chosen):
        item = items[i]
        parts += ["\n" if item.start_line == prev_end + 1 else "\n\n", item.text] if parts else [item.text]
        prev_end = item.end_line
    return "".join(parts)
