"""C source -> audit units: one per function, plus the file-level context each one needs.

The model audits functions, not files (prefilling a whole 60k-token kernel file takes minutes on the pair,
one changed function seconds; docs/architecture.md): a unit is what is sent, cached and
re-audited, so its boundaries must be stable and its key must change exactly when what the model would
see changes. tree-sitter-c gives the functions; kernel code defeats it in known ways
(tree-sitter-c 0.24 knows no kernel macros), which this module repairs:

- ``SYSCALL_DEFINEn(...) { ... }``, ``DEFINE_*(...) {`` and similar macro bodies parse as a call
  expression followed by a stray compound statement: the pair becomes one unit (kind ``macro_body``).
- ``static __always_inline int __must_check`` splits into a declaration with a MISSING ``;`` and the
  definition: the broken declaration is folded into the unit when it sits right above it.
- Unbalanced braces (``#if ... if (x) {`` / ``#else {`` / ``#endif``) make tree-sitter swallow the
  functions that follow into one definition: the unit is cut where the first swallowed definition
  starts, and the walk resumes there. A function it gave up on entirely (loose tokens in an ERROR node:
  header, ``{``, statements) still becomes a unit, up to the next definition.
- The walk never descends into a unit, and units that share a line are merged ("a+b"), so units never
  overlap and each line belongs to at most one unit.

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

A file whose structure is beyond the walk's limits (``#if`` or unbalanced-brace nesting deeper than
``MAX_NESTING``: a hostile repository can nest 1,000 levels in 13 KB) is not refused: it is split into
windows of ``WINDOW_LINES`` lines without context (kind ``lines``), so it is still audited, and
:func:`fallback_note` says so.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import tree_sitter_c
from tree_sitter import Language, Node, Parser, Query, QueryCursor

from k3lsp.wire.address import unit_key

C_LANGUAGE = Language(tree_sitter_c.language())
_DEFINITIONS = Query(C_LANGUAGE, "(function_definition) @f")

MAX_CONTEXT_CHARS = 8000  # ~2k tokens: a unit's context must stay well below the unit itself on average
MAX_FILE_CONTEXT_CHARS = 32_000  # ~8k tokens read once per file: beyond, each unit gets its own context
MAX_ITEM_LINES = 40  # a 500-line table initialiser is not worth its tokens; its head says what it is
MAX_REFERENCES = 4  # top-level lines naming the unit (ops structs, module_init) that show how it is reached
TRANSITIVE_DEPTH = 2  # a macro's macros, a struct's member types; deeper chains are rarely needed
_MIN_ITEM_CHARS = 24  # below this much budget nothing useful fits: stop looking (big files fill the budget)
MAX_NESTING = 200  # containers and resumed walks the splitter follows; real C stays far below, Python's stack too
WINDOW_LINES = 200  # a file beyond the splitter's limits is audited in windows of this many lines
WINDOW_KIND = "lines"

IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_SYSCALL = re.compile(r"^(COMPAT_)?SYSCALL_DEFINE\d$")
_DECLARATOR_WRAPPERS = (
    "function_declarator",
    "pointer_declarator",
    "attributed_declarator",
    "parenthesized_declarator",
)
_MACRO_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")  # SYSCALL_DEFINE3, BPF_CALL_2, DEFINE_SHOW_ATTRIBUTE

# Nodes whose children are top-level code: walked through, never units or context themselves.
_CONTAINERS = frozenset(
    {
        "preproc_if",
        "preproc_ifdef",
        "preproc_else",
        "preproc_elif",
        "preproc_elifdef",
        "ERROR",
        "linkage_specification",
        "declaration_list",
    }
)
# What the loose header of a function inside an ERROR node is made of.
_HEADER_PARTS = frozenset(
    {
        "storage_class_specifier",
        "type_qualifier",
        "primitive_type",
        "sized_type_specifier",
        "type_identifier",
        "struct_specifier",
        "union_specifier",
        "enum_specifier",
        "attribute_specifier",
        "ms_call_modifier",
        "ERROR",
        "identifier",
        "function_declarator",
        "pointer_declarator",
    }
)
_SKIP = frozenset({"comment", ";", "#if", "#ifdef", "#ifndef", "#else", "#elif", "#endif", "identifier"})


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
    kind: str  # function | macro_body | block (a brace block whose header tree-sitter could not read) | lines
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
def split(source: str | bytes) -> tuple[Unit, ...]:
    """The audit units of a C file, in file order.

    Memoised on the text: a save with nothing changed, or several features asking for the units of the
    same document version, cost a hash of the text instead of a parse (a 10k-line file parses in tens of ms).
    """
    return tuple(parse(source).units)


def parse(source: str | bytes) -> ParsedFile:
    """Parse a C file into units and context items; line windows when it is beyond the splitter's limits."""
    data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    try:
        return _parse(data)
    except (_TooDeep, RecursionError):
        return ParsedFile(_windows(data), [])


def fallback_note(units: tuple[Unit, ...] | list[Unit]) -> str | None:
    """What to tell the user when a file was split into line windows instead of functions; None otherwise."""
    if not units or units[0].kind != WINDOW_KIND:
        return None
    return (
        f"nested deeper than the C splitter follows (over {MAX_NESTING} levels of #if or braces): audited as "
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


class _TooDeep(Exception):
    """The walk went deeper than MAX_NESTING."""


def _parse(data: bytes) -> ParsedFile:
    tree = Parser(C_LANGUAGE).parse(data)
    definitions = QueryCursor(_DEFINITIONS).captures(tree.root_node).get("f", [])
    definitions.sort(key=lambda n: n.start_byte)
    scan = _Scan(data, [n.start_byte for n in definitions], definitions)
    scan.walk(tree.root_node)
    items = scan.items
    lines = data.split(b"\n")
    spans = _merge(scan.spans)
    items += _signatures(spans, items, data)
    items.sort(key=lambda item: item.start_line)
    index = _Index.build(items)
    bodies = [b"\n".join(lines[s.start : s.end + 1]) for s in spans]
    chosen = [_chosen(s.name, body, index) for s, body in zip(spans, bodies, strict=True)]
    shared = _joined(items, set().union(*chosen))
    shared = shared if len(shared) <= MAX_FILE_CONTEXT_CHARS else ""
    units = []
    for s, body, picked in zip(spans, bodies, chosen, strict=True):
        context = _joined(items, picked)
        text = body.decode("utf-8", "replace")
        units.append(Unit(s.name, s.kind, s.start, s.end, text, context, unit_key(text, context), shared))
    return ParsedFile(units, items)


# --- finding the units ------------------------------------------------------------------------------------


@dataclass
class _Scan:
    """One walk over a parsed file: collects unit spans and context items."""

    data: bytes
    definition_starts: list[int]  # start bytes of every function_definition node, sorted
    definitions: list[Node]
    spans: list[_Span] = field(default_factory=list)
    items: list[ContextItem] = field(default_factory=list)

    def walk(self, node: Node, from_byte: int = 0, depth: int = 0) -> None:
        """Walk the children of a top-level-like node.

        `from_byte` resumes the walk inside a misparsed unit, at the first definition nested in it; `depth`
        counts the walks this one is inside of (raises _TooDeep beyond MAX_NESTING).
        """
        if depth > MAX_NESTING:
            raise _TooDeep
        data, children = self.data, node.children
        i = 0
        while i < len(children):
            child = children[i]
            nxt = children[i + 1] if i + 1 < len(children) else None
            i += 1
            if child.end_byte <= from_byte:
                continue
            if child.start_byte < from_byte:
                self.walk(child, from_byte, depth + 1)
                continue
            kind = child.type
            if node.type == "ERROR" and kind in _HEADER_PARTS and self.loose_function(node, i - 1, depth):
                return
            if kind == "function_definition" and _is_data(child):
                self.items += filter(None, [_context_item(child, data)])
                continue
            if kind == "function_definition":
                span, body = _function_span(child, data), child
            elif nxt is not None and nxt.type == "function_definition" and _is_split_header(child, nxt):
                span, body = _function_span(nxt, data, header=child), nxt
                i += 1
            elif nxt is not None and nxt.type == "compound_statement" and _macro_call(child) is not None:
                span, body = _macro_body(child, nxt, data), nxt
                i += 1
            elif kind == "compound_statement":
                # A stray block whose header tree-sitter could not recognise: audited, never dropped.
                span, body = _Span(f"block@{child.start_point.row + 1}", "block", *_rows(child)), child
            elif kind in _CONTAINERS:
                self.walk(child, depth=depth + 1)
                continue
            else:
                item = _context_item(child, data) if kind not in _SKIP else None
                if item is not None:
                    self.items.append(item)
                continue
            nested = self.nested_definition(body) if body.has_error else None
            if nested is not None:
                # Unbalanced braces (`#if ... {` / `#else {`) make tree-sitter swallow the functions that
                # follow: the unit ends where the first swallowed one starts, and the rest is top level.
                span.end = max(span.start, nested.start_point.row - 1)
            self.spans.append(span)
            if nested is not None:
                self.walk(body, nested.start_byte, depth + 1)

    def loose_function(self, node: Node, k: int, depth: int) -> bool:
        """A function whose definition tree-sitter gave up on, left as loose tokens in an ERROR node:
        `static int f(int x)` `{` statements... It runs until the next definition (where the walk of
        the ERROR node resumes) or the end of the node. True if one starts at child k (and was taken)."""
        children = node.children
        j, name = k, None
        while j < len(children) and children[j].type in _HEADER_PARTS:
            if children[j].type in ("function_declarator", "pointer_declarator"):
                name = _declarator_name(children[j]) or name
            j += 1
        if name is None or j >= len(children) or children[j].type != "{":
            return False
        start = children[k].start_point.row
        following = self.nested_definition(node, after=children[j].start_byte)
        end = following.start_point.row - 1 if following is not None else _rows(node)[1]
        self.spans.append(_Span(_text(name, self.data), "function", start, max(start, end)))
        if following is not None:
            self.walk(node, following.start_byte, depth + 1)
        return True

    def nested_definition(self, node: Node, after: int | None = None) -> Node | None:
        """The first function definition strictly inside a node (starting after `after`), if any."""
        j = bisect.bisect_right(self.definition_starts, node.start_byte if after is None else after)
        if j < len(self.definitions) and self.definitions[j].start_byte < node.end_byte:
            return self.definitions[j]
        return None


def _rows(node: Node) -> tuple[int, int]:
    """A node's first and last line; a node ending at column 0 (a preprocessor line) ends a line earlier."""
    start, end = node.start_point.row, node.end_point.row
    if end > start and node.end_point.column == 0:
        end -= 1
    return start, end


def _function_span(fn: Node, data: bytes, header: Node | None = None) -> _Span:
    """The span of a function definition; `header` is a broken declaration folded in above it."""
    start, end = _rows(fn)
    if header is not None:
        start = header.start_point.row
    body = fn.child_by_field_name("body")
    name = _declarator_name(fn.child_by_field_name("declarator"))
    type_node = fn.child_by_field_name("type")
    if name is None or (type_node is not None and _SYSCALL.match(_text(type_node, data) or "")):
        # SYSCALL_DEFINE0(name) parses as a definition whose "type" is the macro.
        if type_node is None:
            return _Span(f"block@{start + 1}", "block", start, end)
        macro = _text(type_node, data)
        declarator = fn.child_by_field_name("declarator")
        first = _first_identifier(declarator, data) if declarator is not None else None
        return _macro_span(macro, first, start, end)
    head = (header or fn).start_byte
    return _Span(_text(name, data), "function", start, end, (head, body.start_byte) if body is not None else None)


def _is_data(fn: Node) -> bool:
    """`static SQLITE_WSD struct s {...} x = {...};` parses as a "function" named by a bare identifier
    (no parameter list anywhere): it is data, so context, not a unit."""
    declarator = fn.child_by_field_name("declarator")
    return declarator is not None and declarator.type == "identifier"


def _is_split_header(node: Node, fn: Node) -> bool:
    """`static __always_inline int __must_check\nhelper(...)` parses as a declaration missing its `;`
    right before the definition: that declaration is the start of the function's header."""
    return (
        node.type == "declaration"
        and node.end_point.row >= fn.start_point.row - 1
        and any(c.is_missing and c.type == ";" for c in node.children)
    )


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


def _macro_call(node: Node) -> Node | None:
    """The call expression of `MACRO(args)` (as a statement or a macro-typed declaration), if it is one."""
    target = node.named_children[0] if node.type == "expression_statement" and node.named_children else node
    if target.type == "call_expression":
        fn = target.child_by_field_name("function")
        if fn is not None and fn.type == "identifier":
            return target
    if node.type == "declaration":
        return next((c for c in node.named_children if c.type == "macro_type_specifier"), None)
    return None


def _macro_body(head: Node, body: Node, data: bytes) -> _Span:
    """The span of `MACRO(args)` followed by a block."""
    call = _macro_call(head)
    assert call is not None
    macro_node = call.child_by_field_name("function") or call.child_by_field_name("name") or call.children[0]
    args = call.child_by_field_name("arguments") or call.child_by_field_name("type")
    first = _first_identifier(args, data) if args is not None else None
    return _macro_span(_text(macro_node, data), first, head.start_point.row, _rows(body)[1])


def _macro_span(macro: str, first: str | None, start: int, end: int) -> _Span:
    """A macro-defined function under the kernel's own name (SYSCALL_DEFINE3(read, ...) is sys_read). A
    lower-case "macro" is a function whose header tree-sitter misread (`API_MACRO int f(void){` seen
    as a call `f(void)` or a type `f`): it keeps its own name."""
    if not _MACRO_NAME.match(macro):
        return _Span(macro, "function", start, end)
    if first and _SYSCALL.match(macro):
        return _Span(("compat_sys_" if macro.startswith("COMPAT_") else "sys_") + first, "macro_body", start, end)
    return _Span(f"{macro}({first})" if first else f"{macro}@{start + 1}", "macro_body", start, end)


def _first_identifier(node: Node, data: bytes) -> str | None:
    match = IDENT.search(data, node.start_byte, node.end_byte)
    return match.group().decode() if match else None


def _text(node: Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _merge(spans: list[_Span]) -> list[_Span]:
    """Sort spans and merge those that share a line, so each line belongs to at most one unit."""
    merged: list[_Span] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        last = merged[-1] if merged else None
        if last is None or s.start > last.end:
            merged.append(_Span(s.name, s.kind, s.start, s.end, s.header))
        else:  # `int a(void) {...} int b(void) {...}` on one line: one unit "a+b"
            last.name, last.end, last.header = f"{last.name}+{s.name}", max(last.end, s.end), None
            if s.kind == "function":
                last.kind = "function"
    return merged


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


# --- context ----------------------------------------------------------------------------------------------


def _context_item(node: Node, data: bytes) -> ContextItem | None:
    kind = node.type
    if kind == "preproc_include":
        item_kind, names = "include", ()
    elif kind in ("preproc_def", "preproc_function_def"):
        name = node.child_by_field_name("name")
        item_kind, names = "macro", (_text(name, data),) if name is not None else ()
    elif kind in ("struct_specifier", "union_specifier", "enum_specifier", "type_definition"):
        item_kind, names = "type", _defined_names(node, data)
    elif kind == "declaration":
        names = _defined_names(node, data)
        is_proto = any(d.type == "function_declarator" for d in _declarators(node))
        item_kind = "prototype" if is_proto else "global"
    elif kind == "expression_statement":
        item_kind, names = "reference", ()  # module_init(f); EXPORT_SYMBOL(f);
    elif kind == "function_definition":  # misparsed data (see _is_data)
        declarator = node.child_by_field_name("declarator")
        item_kind, names = "global", (_text(declarator, data),) if declarator is not None else ()
    else:
        return None
    start, end = _rows(node)
    raw = data[node.start_byte : node.end_byte]
    if kind in ("struct_specifier", "union_specifier", "enum_specifier"):
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
        if spec.type in ("struct_specifier", "union_specifier", "enum_specifier") and body is not None:
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
    includes: list[int]

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
        return cls(items, by_name, mentions, [i for i, item in enumerate(items) if item.kind == "include"])


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

    seen = set(IDENT.findall(body)) - {own}
    frontier = sorted(seen)
    for depth in range(TRANSITIVE_DEPTH + 1):
        nxt: set[bytes] = set()
        for ident in frontier:
            if budget < _MIN_ITEM_CHARS:
                break
            for i in index.by_name.get(ident, ()):
                if take(i) and items[i].kind in ("macro", "type", "global"):
                    nxt |= items[i].idents
        if depth == 0:
            for i in index.includes:
                take(i)
        frontier = sorted(nxt - seen)
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
