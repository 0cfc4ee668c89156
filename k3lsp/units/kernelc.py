"""Kernel C made parseable: a length-preserving normalisation of known kernel idioms before tree-sitter parses.

tree-sitter-c knows no kernel macros, and kernel code is written in them: ``for_each_possible_cpu(cpu) {`` reads
as a nested function definition, ``(void __user *)arg`` as an error, ``#ifdef`` / ``#else`` around the head of
an ``if`` as two heads and one body. Coccinelle and smatch parse the kernel with a file of macro hints
(Coccinelle's ``standard.h``: ``MACROANNOTATION``, ``MACROSTATEMENT``, iterators; smatch's list of loop
macros); this module does the same with a table, rewriting the text so that every byte keeps its offset and
every line its number. What the model sees is never this text: units and context are cut from the original
bytes at the same offsets; the normalised text only decides where functions are and what they are called.

What is rewritten (each replaced by spaces, newlines kept, unless said otherwise):

- comments, and the contents of string and character literals (the quotes stay), so that no later step
  mistakes a ``{`` in ``"{"`` or a ``#if`` in a comment for code;
- conditional directives inside braces or parentheses (a statement, a parameter list, an initialiser) with
  every branch after the first that is taken (``#if 0`` takes the next one), as ctags and Coccinelle read
  them; the same at file level when the first branch leaves its braces or parentheses open
  (``#ifdef X`` / ``int f(int a) {`` / ``#else`` / ``int f(int a, int b) {`` / ``#endif``). Balanced
  conditionals at file level are kept: both versions of a function stay units. Other directives inside
  braces or parentheses (``#define``, ``#pragma``) go too. One file is one configuration: once a branch
  on ``X`` being defined (``#ifdef X``, ``#ifndef X``, ``#if defined(X)``) is the one read, a later test of
  ``X`` reads the branch that agrees with it, so a ``{`` opened under ``#ifndef X`` is closed by the ``}``
  in the ``#else`` of a later ``#ifdef X`` (drivers/atm/horizon.c), not left open to swallow the file;
- attribute macros (``__user``, ``__must_check``, ``__printf(3, 4)``, ``__sized_by(n)``, ``__attribute__((...))``)
  and statement-like macros (``__unreachable_ok_push``), with their arguments where the table says so;
- ``SYSCALL_DEFINE3(read, unsigned int, fd, ...)`` (and ``COMPAT_SYSCALL_DEFINEn``) at a line's start becomes
  ``long sys_read( unsigned int, fd, ...)``: a function definition under the kernel's name for it;
- loop-like macros at the head of a statement inside a function (``for_each_possible_cpu(cpu)``,
  ``list_for_each_entry(pos, head, member)``, ``} while_each_thread(p, t);``) become ``while(1)``, which
  reads the same way before a block, before a single statement and after ``do { }``.

The table (:class:`Macros`) holds names and ``*`` globs; ``name()`` means "with its parenthesised arguments".
Users extend it with the ``kernelMacros`` setting (parsed by :meth:`Macros.parse`).
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from k3lsp.units import cxx

MAX_NESTING = 200  # #if groups, braces or containers inside each other (a hostile file nests 1,000 in 13 KB)
MAX_TABLE_ENTRIES = 2000  # per category of the user's table: a settings typo must not make every split slow

KINDS = ("loops", "attributes", "statements")

# Loop-like macros: the kernel's iterators, the BSD queue macros, XNU's own (grep `#define X(...) for (`).
DEFAULT_LOOPS = (
    "for_each_*",
    "*_for_each",
    "*_for_each_*",
    "do_each_*",
    "while_each_*",
    "*foreach*",
    "*FOREACH*",
    "scoped_guard",
    "scoped_cond_guard",
    "skb_queue_walk*",
    "skb_rbtree_walk*",
    "*_iterate",
    "for_rx_tx",
    "for_all_rings",
    "smrq_serialized_iter",
    "T_STAT_MEASURE*",
)
# Attribute macros: Coccinelle's MACROANNOTATION list, Linux's compiler_attributes.h / compiler_types.h and
# XNU's sys/cdefs.h / os/base.h. `name()` takes parenthesised arguments.
DEFAULT_ATTRIBUTES = (
    # GNU C itself (tree-sitter knows some of them, but not in every position)
    "__attribute__()",
    "__attribute()",
    "__declspec()",
    "__extension__",
    # Linux: sections, address spaces, checker annotations
    "__init",
    "__exit",
    "__initdata",
    "__initconst",
    "__exitdata",
    "__devinit",
    "__devexit",
    "__devinitdata",
    "__cpuinit",
    "__cpuinitdata",
    "__meminit",
    "__meminitdata",
    "__init_or_module",
    "__initdata_or_module",
    "__ref",
    "__refdata",
    "__refconst",
    "__net_init",
    "__net_exit",
    "__net_initdata",
    "__user",
    "__kernel",
    "__iomem",
    "__percpu",
    "__rcu",
    "__force",
    "__nocast",
    "__safe",
    "__private",
    "__bitwise",
    "__must_check",
    "__always_inline",
    "__inline_maybe_unused",
    "noinline",
    "__noinline",
    "noinline_for_stack",
    "notrace",
    "__cold",
    "__hot",
    "__weak",
    "__used",
    "__unused",
    "__maybe_unused",
    "__always_unused",
    "__visible",
    "__noreturn",
    "__packed",
    "__deprecated",
    "__read_mostly",
    "__ro_after_init",
    "__cacheline_aligned",
    "__cacheline_aligned_in_smp",
    "____cacheline_aligned",
    "____cacheline_aligned_in_smp",
    "____cacheline_internodealigned_in_smp",
    "__page_aligned_data",
    "__page_aligned_bss",
    "__sched",
    "__kprobes",
    "__latent_entropy",
    "__randomize_layout",
    "__no_randomize_layout",
    "__nocfi",
    "__noclone",
    "__naked",
    "__no_sanitize_address",
    "__no_kcsan",
    "noinstr",
    "__noinstr",
    "__irq_entry",
    "__lockfunc",
    "__attribute_const__",
    "__malloc",
    "__flatten",
    "__nonstring",
    "__pure",
    "__mustbe_array",
    "asmlinkage",
    "fastcall",
    "__printf()",
    "__scanf()",
    "__aligned()",
    "__section()",
    "__alias()",
    "__alloc_size()",
    "__assume_aligned()",
    "__must_hold()",
    "__acquires()",
    "__releases()",
    "__counted_by()",
    "__sized_by()",
    "__guarded_by()",
    "__pt_guarded_by()",
    "__free()",
    "__cleanup()",
    "__bpf_kfunc",
    "nokprobe_inline",
    "__softirq_entry",
    "__cpuidle",
    # XNU: sys/cdefs.h, os/base.h, the bounds-safety annotations
    "__dead2",
    "__pure2",
    "__abortlike",
    "__exported",
    "__header_always_inline",
    "__header_inline",
    "__result_use_check",
    "__unavailable",
    "__XNU_PRIVATE_EXTERN",
    "__private_extern__",
    "__disable_tail_calls",
    "__not_tail_called",
    "__stateful_pure",
    "__unsafe_buffer_usage",
    "__kernel_ptr_semantics",
    "__kernel_data_semantics",
    "__kernel_dual_semantics",
    "__xnu_data_size",
    "__xnu_returns_data_pointer",
    "__single",
    "__indexable",
    "__bidi_indexable",
    "__unsafe_indexable",
    "__null_terminated",
    "__header_indexable",
    "__header_bidi_indexable",
    "__unsafe_late_const",
    "__startup_func",
    "__startup_data",
    "__security_const_late",
    "__zpercpu",
    "__returns_nonnull",
    "__enum_closed",
    "__enum_open",
    "__enum_options",
    "__xnu_string_inline",
    "__xnu_pass_struct_size",
    "__xnu_pass_member_size",
    "__xnu_pass_object_size",
    "__xnu_force_overload",
    "__xnu_struct_size_precondition()",
    "__xnu_member_size_precondition()",
    "__xnu_object_size_precondition()",
    "MARK_AS_PMAP_TEXT",
    "MARK_AS_PMAP_RODATA",
    "MARK_AS_FIXUP_TEXT",
    "OS_ALWAYS_INLINE",
    "OS_NOINLINE",
    "OS_NORETURN",
    "OS_COLD",
    "OS_USED",
    "OS_UNUSED",
    "OS_WEAK",
    "OS_WEAK_IMPORT",
    "OS_WARN_RESULT",
    "OS_MALLOC",
    "OS_PURE",
    "OS_CONST",
    "OS_EXPORT",
    "OS_NOESCAPE",
    "OS_NOTHROW",
    "OS_NOT_TAIL_CALLED",
    "OS_OVERLOADABLE",
    "OS_SENTINEL",
    "OS_NONNULL*",
    "__printflike()",
    "__printf0like()",
    "__scanflike()",
    "__osloglike()",
    "__deprecated_msg()",
    "__kpi_deprecated()",
    "__swift_unavailable()",
    "__counted_by_or_null()",
    "__sized_by_or_null()",
    "__ended_by()",
    "__terminated_by()",
    "__ptrauth()",
    "__alloc_align()",
    "__xnu_struct_group_attributes()",
    "API_AVAILABLE()",
    "API_UNAVAILABLE()",
    "__API_AVAILABLE()",
    "__OSX_AVAILABLE()",
    "__IOS_AVAILABLE()",
    "OS_ALIGNED()",
    "OS_FORMAT_PRINTF()",
)
# Statement-like macros: used where a statement or a declaration goes, often without a `;` after them.
DEFAULT_STATEMENTS = (
    "__unreachable_ok_push",
    "__unreachable_ok_pop",
    "__typed_allocators_ignore_push",
    "__typed_allocators_ignore_pop",
    "__exported_push",
    "__exported_pop",
    "__exported_push_hidden",
    "__unsafe_buffer_usage_begin",
    "__unsafe_buffer_usage_end",
    "__SECURITY_STACK_DISALLOWED_PUSH",
    "__SECURITY_STACK_DISALLOWED_POP",
    "__ASSUME_PTR_ABI_SINGLE_BEGIN",
    "__ASSUME_PTR_ABI_SINGLE_END",
    "__BEGIN_DECLS",
    "__END_DECLS",
    "__ptrcheck_abi_assume_single()",
    "__ptrcheck_abi_assume_unsafe_indexable()",
    "_Pragma()",
    "__pragma()",
    "__diag_push()",
    "__diag_pop()",
    "__diag_ignore()",
    "__diag_ignore_all()",
    "rcu_read_lock_guard()",
)

_ENTRY = re.compile(r"^[A-Za-z_*][A-Za-z0-9_*]*(\(\))?$")


class TooDeep(Exception):
    """A file nests #if groups (or braces) deeper than the splitter follows: split it into line windows."""


@dataclass(frozen=True, repr=False)
class Macros:
    """The macro table: names and ``*`` globs per kind; ``name()`` also covers the parenthesised arguments."""

    loops: tuple[str, ...] = DEFAULT_LOOPS
    attributes: tuple[str, ...] = DEFAULT_ATTRIBUTES
    statements: tuple[str, ...] = DEFAULT_STATEMENTS
    _rules: _Rules = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rules", _Rules.build(self))

    def __reduce__(self) -> tuple[Any, tuple[tuple[str, ...], ...]]:
        """Pickled as its entries, never with this process's memo of identifiers (200,000 names: 2.3 MB sent with
        every split); unpickled as the one table of those entries in the receiving process, so the splitter's
        worker keeps its memo warm from file to file instead of looking up every name of every file again."""
        return (_interned, (self.loops, self.attributes, self.statements))

    def __repr__(self) -> str:
        added = sum(len(set(getattr(self, k)) - set(getattr(DEFAULT_MACROS, k))) for k in KINDS)
        return f"the built-in kernel macro table{f' plus {added} entries' if added else ''}"

    def kind_of(self, name: str) -> str | None:
        """The kind of a name in this table (loops, attributes, statements), or None."""
        hit = self._rules.lookup(name.encode())
        return hit[0] if hit is not None else None

    def extended(self, extra: Mapping[str, tuple[str, ...]]) -> Macros:
        """This table with the user's entries added (the defaults stay: a setting extends, never replaces)."""
        grown = {k: tuple(dict.fromkeys((*getattr(self, k), *extra.get(k, ())))) for k in KINDS}
        return Macros(**grown)

    @classmethod
    def parse(cls, value: Any) -> Macros:
        """The ``kernelMacros`` setting: ``{"loops": [...], "attributes": [...], "statements": [...]}`` (every key
        optional), added to the defaults. Raises ValueError saying what is wrong."""
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object with keys {', '.join(KINDS)}")
        extra: dict[str, tuple[str, ...]] = {}
        for key, entries in value.items():
            if key not in KINDS:
                raise ValueError(f"unknown key {key!r} (known: {', '.join(KINDS)})")
            if not isinstance(entries, list | tuple) or len(entries) > MAX_TABLE_ENTRIES:
                raise ValueError(f"{key}: expected a list of at most {MAX_TABLE_ENTRIES} macro names")
            for entry in entries:
                if not isinstance(entry, str) or len(entry) > 200 or not _ENTRY.match(entry) or not entry.strip("*()"):
                    raise ValueError(f"{key}: {entry!r} is not a macro name, a glob such as for_each_*, or name()")
            extra[key] = tuple(entries)
        return cls().extended(extra)


@dataclass(frozen=True)
class _Rules:
    """The table compiled for lookups: exact names in dicts, globs in one regex per kind, memoised per name."""

    exact: dict[bytes, tuple[str, bool]]  # name -> (kind, takes arguments)
    globs: tuple[tuple[re.Pattern[bytes], str, bool], ...]
    seen: dict[bytes, tuple[str, bool] | None]  # memo of every identifier looked up (a file has ~10k distinct)
    hits: dict[bytes, tuple[str, bool]]  # the names of ``seen`` that are in the table

    @classmethod
    def build(cls, macros: Macros) -> _Rules:
        exact: dict[bytes, tuple[str, bool]] = {}
        globs: dict[tuple[str, bool], list[str]] = {}
        for kind in KINDS:
            for entry in getattr(macros, kind):
                hit = (kind, kind == "loops" or entry.endswith("()"))
                name = entry.removesuffix("()")
                if "*" in name:
                    globs.setdefault(hit, []).append(fnmatch.translate(name))
                else:
                    exact.setdefault(name.encode(), hit)
        compiled = tuple((re.compile("|".join(g).encode()), *hit) for hit, g in globs.items())
        return cls(exact, compiled, {}, {})

    def lookup(self, name: bytes) -> tuple[str, bool] | None:
        if name in self.seen:
            return self.seen[name]
        found = self.exact.get(name)
        if found is None:
            found = next(((kind, args) for rx, kind, args in self.globs if rx.match(name)), None)
        if len(self.seen) < 200_000:
            self.seen[name] = found
            if found is not None:
                self.hits[name] = found
        return found

    def found_in(self, names: set[bytes]) -> dict[bytes, tuple[str, bool]]:
        """The names of a file that are in the table: the memo answers the names seen before with set
        operations (in C: ``set.difference`` of a dict tests each name, never walks the dict), and only the new
        ones are looked up one by one."""
        found = {name: self.hits[name] for name in names.intersection(self.hits)}  # the table's few hits
        for name in names.difference(self.seen):
            hit = self.lookup(name)
            if hit is not None:
                found[name] = hit
        return found


DEFAULT_MACROS = Macros()


@functools.lru_cache(maxsize=8)  # the default table and a few of the user's
def _interned(loops: tuple[str, ...], attributes: tuple[str, ...], statements: tuple[str, ...]) -> Macros:
    """The table of these entries in this process (see ``Macros.__reduce__``)."""
    return Macros(loops, attributes, statements)


# --- the passes -------------------------------------------------------------------------------------------

_BLANK = bytes(b if b == 0x0A else 0x20 for b in range(256))  # every byte but newline -> space
_LITERALS = re.compile(
    rb"/\*.*?\*/|//(?:[^\n\\]|\\.)*|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'",
    re.S,
)
_DIRECTIVE = re.compile(rb"[ \t]*#[ \t]*([a-z]*)(?:[^\n\\]|\\.)*", re.S)
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_BRACES = re.compile(rb"[{}]")
_C_CONTAINER_OPEN = re.compile(rb"extern\s*\"[^\"\n]*\"\s*\{")
_CPP_CONTAINER_OPEN = re.compile(rb"(?:extern\s*\"[^\"\n]*\"|\b(?:namespace|class|struct|union)\b[^;{}()=]*)\{")
_EXTERN = re.compile(rb"(?:^|\s)extern\s*\"[^\"]*\"\s*$")
_CPP_CONTAINER = re.compile(rb"(?:^|[\s>])(?:namespace|class|struct|union)\b[^()=]*$|^\s*namespace\s*$")
_CONDITIONAL_OPEN = frozenset({b"if", b"ifdef", b"ifndef"})
_CONDITIONAL_NEXT = frozenset({b"elif", b"else", b"elifdef", b"elifndef"})
_IF0 = re.compile(rb"[ \t]*#[ \t]*if[ \t]+0[ \t]*$")
# A condition on one macro being defined: `#ifdef X`, `#ifndef X`, `#if defined(X)`, `#if !defined X`.
_DEFINED = re.compile(
    rb"[ \t]*#[ \t]*(?:(ifdef|ifndef)[ \t]+(\w+)|if[ \t]+(!?)[ \t]*defined[ \t]*(?:\([ \t]*(\w+)[ \t]*\)|[ \t]+(\w+)))"
    rb"[ \t]*$"
)
_STATEMENT_BEFORE = frozenset(b";{}):")
_TAGS = frozenset({b"struct", b"union", b"enum"})
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SIMPLE_ARGUMENTS = re.compile(rb"[ \t\r\n]*\([^(){};]*\)")  # no parentheses inside: most macro arguments
_SYSCALL_HEAD = re.compile(rb"(?m)^(COMPAT_)?SYSCALL_DEFINE(\d)\([ \t]*([A-Za-z_]\w*)[ \t]*([,)])")


@dataclass(frozen=True)
class Normalised:
    """A file made parseable: the text (same length and lines as the original), whether it is C++, where a
    ``SYSCALL_DEFINEn`` header was rewritten (the functions macros define) and where attributes were blanked."""

    text: bytes
    cpp: bool
    syscalls: tuple[int, ...] = ()
    attributes: tuple[int, ...] = ()

    @functools.cached_property
    def directives(self) -> list[tuple[int, int, bytes]]:
        """The text's preprocessor lines (:func:`directives`), read once for the steps that all need them."""
        return directives(self.text)


def normalise(data: bytes, macros: Macros = DEFAULT_MACROS) -> Normalised:
    """The text tree-sitter and the splitter read: same length, same line breaks, kernel idioms made plain C."""
    out = bytearray(_LITERALS.sub(_blank_literal, data))
    cpp = cxx.is_cpp(bytes(out), data)
    _directives(out, cpp)
    attributes = _macros(out, macros._rules)
    syscalls = _syscalls(out)
    return Normalised(bytes(out), cpp, syscalls, attributes)


def _blank_literal(m: re.Match[bytes]) -> bytes:
    """A comment or literal as spaces (newlines kept; a string or character keeps its quotes: it stays a string, an
    ``extern "C"`` stays linkage). A comment over several lines continues a #define it is in (comments go before
    directives are read): a backslash at each of its line ends keeps that so (elsewhere it is only whitespace)."""
    found = m.group()
    if found[0] in b"\"'":
        return found[:1] + found[1:-1].translate(_BLANK).replace(b" \n", b"\\\n") + found[-1:]
    return found.translate(_BLANK).replace(b" \n", b"\\\n")


def is_container(header: bytes, cpp: bool) -> bool:
    """Whether the code before a ``{`` opens a container whose contents are top level: ``extern "C"``, and in
    C++ a namespace or a class body (its inline methods are functions)."""
    return bool(_EXTERN.search(header)) or (cpp and bool(_CPP_CONTAINER.search(header)))


def directives(text: bytes) -> list[tuple[int, int, bytes]]:
    """The preprocessor lines of a text whose comments are blanked: (start, end, directive word), in order;
    a line continued with a backslash is one directive."""
    out = []
    i = text.find(b"#")
    while i >= 0:
        start = text.rfind(b"\n", 0, i) + 1
        if text[start:i].strip(b" \t"):
            i = text.find(b"#", i + 1)  # `a ## b` or `#` inside code: not a directive
            continue
        m = _DIRECTIVE.match(text, start)
        assert m is not None
        out.append((start, m.end(), m.group(1)))
        i = text.find(b"#", m.end())
    return out


@dataclass
class _Group:
    """One #if ... #endif group being read."""

    depth: int  # brace + parenthesis depth at its #if
    lines: list[tuple[int, int]]  # its directive lines
    taken: bool  # some branch so far is kept
    condition: tuple[bytes, bool] | None  # (macro, defined) its first branch needs, when it tests one macro
    skip_from: int | None = None  # the start of the branch being blanked
    blanks: bool = False  # it blanked something, or sits inside braces: its directive lines go too


def _directives(out: bytearray, cpp: bool) -> None:
    """Blank the directives and branches tree-sitter cannot read (see the module docstring).

    Depth counts the braces and parentheses open in the code kept (with bytes.count between directives:
    linear, in C; never below 0), less the braces of the containers around (``extern "C" {``; in C++
    namespaces and classes), whose contents are top level."""
    text = bytes(out)
    spans = directives(text)
    opens, closes = _containers(text, spans, cpp)
    stack: list[_Group] = []
    skipping = 0  # #if groups open inside a blanked branch
    raw = 0  # brackets open, containers' braces included
    counted = 0  # text before this has been counted (or skipped)
    last = 0x3B  # the last byte of code before this directive (the file's start counts as a `;`)
    blank: list[tuple[int, int]] = []
    assumed: dict[bytes, bool] = {}  # macro -> defined, as the branches read so far take it
    for s, e, word in spans:
        group = stack[-1] if stack else None
        if group is None or group.skip_from is None:
            raw = max(0, raw + _depth_change(text, counted, s))
            code = text[counted:s].rstrip(b" \t\r\n\f\v\\")
            last = code[-1] if code else last
        counted = e
        depth = max(0, raw - (bisect.bisect_left(opens, s) - bisect.bisect_left(closes, s)))
        if skipping:
            skipping += (word in _CONDITIONAL_OPEN) - (word == b"endif")
            continue
        if group is not None and group.skip_from is not None and word in _CONDITIONAL_OPEN:
            skipping = 1
            continue
        if word in _CONDITIONAL_OPEN:
            if len(stack) >= MAX_NESTING:
                raise TooDeep
            condition = _condition(text, s, e)
            false = depth > 0 and (
                bool(_IF0.match(text, s, e))
                or (condition is not None and assumed.get(condition[0], condition[1]) != condition[1])
            )
            if depth > 0 and not false and condition is not None:
                assumed.setdefault(*condition)
            group = _Group(depth, [(s, e)], not false, condition, skip_from=e if false else None, blanks=depth > 0)
            stack.append(group)
        elif word in _CONDITIONAL_NEXT and group is not None:
            group.lines.append((s, e))
            if group.skip_from is not None:
                blank.append((group.skip_from, s))
                group.skip_from = None if not group.taken else e
                group.taken = True
            elif group.depth > 0 or depth != group.depth or last not in b";}":
                # inside braces, or a branch that leaves them open or stops inside a declaration
                # (`int` / `#ifdef A` / `f(int a)` / `#else` / `f(a) int a;` / `#endif` / `{`): the first one
                group.skip_from, group.blanks = e, True
                if group.condition is not None:
                    assumed.setdefault(*group.condition)
        elif word == b"endif" and group is not None:
            stack.pop()
            group.lines.append((s, e))
            if group.skip_from is not None:
                blank.append((group.skip_from, s))
            if group.blanks:
                blank += group.lines
        elif depth > 0 and word not in _CONDITIONAL_NEXT and word != b"endif":
            blank.append((s, e))  # #define, #pragma, #include... inside a body or a parameter list
    for s, e in blank:
        out[s:e] = out[s:e].translate(_BLANK)


def _condition(text: bytes, s: int, e: int) -> tuple[bytes, bool] | None:
    """The macro an ``#if``/``#ifdef``/``#ifndef`` line tests and whether its first branch needs it defined;
    None for any other condition."""
    m = _DEFINED.match(text, s, e)
    if m is None or m.end() != e:
        return None
    word, name, negated, inner, bare = m.groups()
    if word is not None:
        return name, word == b"ifdef"
    return inner or bare, not negated


def _depth_change(text: bytes, start: int, end: int) -> int:
    """How many braces and parentheses text[start:end] opens, less those it closes."""
    return (
        text.count(b"{", start, end)
        + text.count(b"(", start, end)
        - text.count(b"}", start, end)
        - text.count(b")", start, end)
    )


def _containers(text: bytes, spans: list[tuple[int, int, bytes]], cpp: bool) -> tuple[list[int], list[int]]:
    """The braces of the containers (``extern "C" {``, C++ namespaces and classes): their `{` and their `}`
    positions, each sorted. Only the few containers are matched brace by brace."""
    starts = [s for s, _, _ in spans]
    opens: list[int] = []
    closes: list[int] = []
    for m in (_CPP_CONTAINER_OPEN if cpp else _C_CONTAINER_OPEN).finditer(text):
        p = m.end() - 1
        k = bisect.bisect_right(starts, p) - 1
        if (k >= 0 and p < spans[k][1]) or not is_container(_item_before(text, p), cpp):
            continue
        level = 0
        for b in _BRACES.finditer(text, p):
            q = b.start()
            k = bisect.bisect_right(starts, q) - 1
            if k >= 0 and q < spans[k][1]:
                continue  # a brace in a #define
            level += 1 if text[q] == 0x7B else -1
            if not level:
                opens.append(p)
                closes.append(q)
                break
    closes.sort()
    return opens, closes


def _item_before(text: bytes, p: int) -> bytes:
    """The code between the last ``;``, ``{`` or ``}`` before p and p: the header of the brace at p."""
    return text[max(text.rfind(b";", 0, p), text.rfind(b"{", 0, p), text.rfind(b"}", 0, p)) + 1 : p]


def _macros(out: bytearray, rules: _Rules) -> tuple[int, ...]:
    """Blank attribute and statement macros, turn loop macros at a statement's head into ``while(1)``; returns
    where each attribute blanked starts (a declaration that begins with one still begins there).

    The file's distinct identifiers are looked up once (findall and a set, in C); only the names that hit
    are searched for again, so a file without table macros costs one findall."""
    text = bytes(out)
    hits = rules.found_in(set(_IDENT.findall(text)))
    attributes: list[int] = []
    if not hits:
        return ()
    spans = [(s, e) for s, e, _ in directives(text)]
    starts = [s for s, _ in spans]
    found = sorted(_occurrences(text, hits))
    functions = {name for s, name in found if hits[name] == ("attributes", True) and _defines(text, s, s + len(name))}
    depth, counted = 0, 0
    for s, name in found:
        e = s + len(name)
        d = bisect.bisect_right(starts, s) - 1
        if (d >= 0 and s < spans[d][1]) or name in functions:
            continue  # inside a #define, or a function of this file named like an attribute: left as written
        kind, args = hits[name]
        end = arguments_end(text, e) if args else e
        if kind != "loops":
            end = e if end is None else end
            out[s:end] = out[s:end].translate(_BLANK)
            if kind == "attributes":
                attributes.append(s)
            continue
        braces = text.count(b"{", counted, s) - text.count(b"}", counted, s)
        depth, counted = max(0, depth + braces), s
        if end is None or depth == 0 or not _loop_head(text, s, end):
            continue
        line_end = text.find(b"\n", s, end)
        room = (end if line_end < 0 else line_end) - s
        head = b"while(1)" if room >= 8 else b"if(1)" if room >= 5 else None
        if head is not None:
            out[s:end] = out[s:end].translate(_BLANK)
            out[s : s + len(head)] = head
    return tuple(attributes)


def _defines(text: bytes, s: int, e: int) -> bool:
    """Whether the attribute-like name at text[s:e] is the name of a function defined there: after a type
    (``static void __cleanup(struct ioatdma_chan *c, ...) {``, ``__init __free(...)``), with a parameter list
    and a body. An attribute after a parameter list follows a ``)``; ``struct __attribute__((packed)) {`` a
    tag keyword, and its arguments start with a parenthesis."""
    end = arguments_end(text, e)
    if end is None or not text[end:].lstrip(b" \t\r\n\f\v\\").startswith(b"{"):
        return False
    before = text[max(0, s - 80) : s].rstrip()
    if not before or (before[-1] not in _WORD and before[-1:] != b"*"):
        return False
    if before.rsplit(None, 1)[-1] in _TAGS:
        return False
    return not text[text.index(b"(", e) + 1 : end].lstrip().startswith(b"(")


def _occurrences(text: bytes, names: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """Where each name occurs in text as a whole identifier (bytes.find: memchr speed, a few names)."""
    for name in names:
        i = text.find(name)
        while i >= 0:
            j = i + len(name)
            if (not i or text[i - 1] not in _WORD) and (j >= len(text) or text[j] not in _WORD):
                yield i, name
            i = text.find(name, j)


def _syscalls(out: bytearray) -> tuple[int, ...]:
    """``SYSCALL_DEFINE3(read, unsigned int, fd, ...)`` -> ``long sys_read( unsigned int, fd, ...)`` (the pairs
    of type and name read as parameters), ``SYSCALL_DEFINE0(sync)`` -> ``long sys_sync(void)``: a function
    definition to tree-sitter, under the kernel's own name. Returns where each rewritten header starts."""
    text = bytes(out)
    starts: list[int] = []
    if b"SYSCALL_DEFINE" not in text:  # most files: one memchr-speed scan instead of a regex at every line start
        return ()
    for m in _SYSCALL_HEAD.finditer(text):
        compat, arity, name, after = m.groups()
        new = b"long " + (b"compat_sys_" if compat else b"sys_") + name + (b"(void)" if arity == b"0" else b"(")
        if (after == b")") != (arity == b"0") or len(new) > m.end() - m.start():
            continue
        out[m.start() : m.end()] = new.ljust(m.end() - m.start())
        starts.append(m.start())
    return tuple(starts)


def arguments_end(text: bytes, e: int) -> int | None:
    """The end of the balanced ``( ... )`` right after position e (spaces allowed before it), or None."""
    simple = _SIMPLE_ARGUMENTS.match(text, e)
    if simple is not None:
        return simple.end()
    i = e
    n = len(text)
    while i < n and text[i] in b" \t\n\r":
        i += 1
    if i >= n or text[i] != 0x28:
        return None
    level = 0
    for j in range(i, min(n, i + 20_000)):  # an argument list longer than this is not a macro's
        c = text[j]
        if c == 0x28:
            level += 1
        elif c == 0x29:
            level -= 1
            if level == 0:
                return j + 1
        elif c in b"};":
            return None
    return None


def _loop_head(text: bytes, s: int, end: int) -> bool:
    """Whether the macro call text[s:end] heads a loop: where a statement starts, and followed by its body
    (or, after ``}``, by the ``;`` of ``do { } while_each_thread(p, t);``)."""
    i = s - 1
    while i >= 0 and text[i] in b" \t\n\r":
        i -= 1
    prev = text[i : i + 1] or b";"
    if prev[0] not in _STATEMENT_BEFORE and text[max(0, i - 3) : i + 1] != b"else" and text[i - 1 : i + 1] != b"do":
        return False
    after = text[end : end + 200].lstrip()[:1]
    return after not in (b";", b",", b")", b"=", b"") or (after == b";" and prev == b"}")
