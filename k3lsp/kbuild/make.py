"""The part of GNU make that kbuild Makefiles use, evaluated in Python, running nothing.

kbuild says what it builds in make variables (``obj-$(CONFIG_X) += a.o dir/``), under ``ifdef``/``ifeq``
conditionals, with ``:=``/``+=``/``=`` and line continuations; reading them takes make's own rules for variables
(simple and recursive flavours), conditionals and the text functions. ``$(shell ...)`` and ``$(eval ...)`` are never
run: they expand to nothing and the evaluation says it was unsure (``Evaluation.unsure``). Every assignment is
recorded with its place, its written left side and the words it adds, also in branches a conditional skipped
(with that conditional as the reason), so a file that is not built can say which rule left it out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.wire import supplied

MAX_MAKEFILE_BYTES = 4 * 1024 * 1024  # Linux's largest Makefile is some 70 KB
MAX_DEPTH = 64  # nested expansions, includes and calls, at most: a Makefile that recurses further is unsure
_ASSIGN = re.compile(r"(::=|:=|\+=|\?=|!=|=)")
_CONDITIONAL = re.compile(r"^(ifeq|ifneq|ifdef|ifndef)\b\s*(.*)$")
_MODIFIERS = ("export", "override", "private", "unexport")


@dataclass(frozen=True)
class Assignment:
    """One assignment as written (``obj-$(CONFIG_X) += a.o``): where, the left side as written and expanded, the
    words it adds, and why it did not happen (empty when it did: a skipped branch names its conditional)."""

    path: str
    line: int
    written: str
    name: str
    words: tuple[str, ...]
    skipped: str = ""


@dataclass
class Variable:
    """A make variable: its flavour (simple ones hold expanded text) and its text."""

    text: str
    simple: bool
    exported: bool = False


@dataclass
class Evaluation:
    """What evaluating Makefiles left: the variables, every assignment seen, and whether something could not be
    told (a shell call, an eval, an include that is not there, recursion too deep)."""

    root: Path
    variables: dict[str, Variable] = field(default_factory=dict)
    assignments: list[Assignment] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)
    depth: int = 0

    def words(self, name: str) -> list[str]:
        """A variable's value, expanded and split as make splits it."""
        return self.expand(f"$({name})").split()

    def define(self, name: str, text: str, *, exported: bool = False) -> None:
        """Sets a simple variable (the environment a sub-make starts with)."""
        self.variables[name] = Variable(text, simple=True, exported=exported)

    def exported(self) -> dict[str, str]:
        """The exported variables, expanded: what a sub-make inherits."""
        return {name: self.expand(f"$({name})") for name, var in self.variables.items() if var.exported}

    def expand(self, text: str) -> str:
        """``text`` with its references and function calls expanded, as make expands them."""
        if "$" not in text:
            return text
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                self.unsure.append(f"expansion deeper than {MAX_DEPTH}: {text[:80]}")
                return ""
            return self._expand(text)
        finally:
            self.depth -= 1

    def _expand(self, text: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(text):
            dollar = text.find("$", i)
            if dollar < 0 or dollar + 1 >= len(text):
                out.append(text[i:])
                break
            out.append(text[i:dollar])
            opener = text[dollar + 1]
            if opener in "({":
                end = _closing(text, dollar + 1)
                out.append(self._reference(text[dollar + 2 : end]))
                i = end + 1
            elif opener == "$":
                out.append("$")
                i = dollar + 2
            else:
                out.append(self._value(opener))
                i = dollar + 2
        return "".join(out)

    def _reference(self, inner: str) -> str:
        """``$(inner)``: a function call, a substitution reference (``$(var:a=b)``) or a variable."""
        head = re.match(r"([\w-]+)[ \t]", inner)
        if head and head.group(1) in FUNCTIONS:
            return FUNCTIONS[head.group(1)](self, _arguments(inner[head.end() :]))
        name = self.expand(inner) if "$" in inner and ":" not in inner else inner
        if ":" in name and "=" in name.split(":", 1)[1]:
            var, pattern = name.split(":", 1)
            old, new = (self.expand(part) for part in pattern.split("=", 1))
            if "%" not in old:
                old, new = "%" + old, "%" + new
            return " ".join(_patsubst(old, new, word) for word in self._value(self.expand(var)).split())
        return self._value(name)

    def _value(self, name: str) -> str:
        var = self.variables.get(name)
        if var is None:
            return ""
        return var.text if var.simple else self.expand(var.text)

    def assign(self, name: str, op: str, text: str, *, exported: bool = False) -> None:
        """One assignment with make's semantics for each operator."""
        var = self.variables.get(name)
        exported = exported or (var is not None and var.exported)  # `export X` may come before X is set
        if op in (":=", "::="):
            self.variables[name] = Variable(self.expand(text), simple=True)
        elif op == "=":
            self.variables[name] = Variable(text, simple=False)
        elif op == "?=":
            if var is None:
                self.variables[name] = Variable(text, simple=False)
        elif op == "!=":
            self.unsure.append(f"{name} != {text[:60]} (a shell command, not run)")
            self.variables[name] = Variable("", simple=True)
        elif var is None:
            self.variables[name] = Variable(text, simple=False)
        else:
            added = self.expand(text) if var.simple else text
            var.text = f"{var.text} {added}" if var.text else added
        if exported:
            self.variables[name].exported = True


def _closing(text: str, start: int) -> int:
    """The index of the bracket that closes the one at ``start`` (or the end of the text)."""
    opener = text[start]
    closer = ")" if opener == "(" else "}"
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _outside(text: str) -> Iterator[tuple[int, str]]:
    """Each character outside brackets (a reference's ``$(...)``, a function's arguments), with its index: where
    make looks for commas, comments and assignment operators."""
    depth = 0
    for i, char in enumerate(text):
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
        elif depth <= 0:
            yield i, char


def _arguments(text: str) -> list[str]:
    """A function's arguments: split at the commas outside nested references, not yet expanded."""
    args: list[str] = []
    start = 0
    for i, char in _outside(text):
        if char == ",":
            args.append(text[start:i])
            start = i + 1
    args.append(text[start:])
    return args


def _patsubst(pattern: str, replacement: str, word: str) -> str:
    """make's ``%`` pattern replacement of one word (the word unchanged when it does not match)."""
    if "%" not in pattern:
        return replacement if word == pattern else word
    prefix, suffix = pattern.split("%", 1)
    if word.startswith(prefix) and word.endswith(suffix) and len(word) >= len(prefix) + len(suffix):
        stem = word[len(prefix) : len(word) - len(suffix)]
        return replacement.replace("%", stem, 1) if "%" in replacement else replacement
    return word


def _matches(pattern: str, word: str) -> bool:
    return _patsubst(pattern, "\0", word) == "\0" if "%" in pattern else word == pattern


def _words(ev: Evaluation, arg: str) -> list[str]:
    return ev.expand(arg).split()


def _if(ev: Evaluation, args: list[str]) -> str:
    if ev.expand(args[0]).strip():
        return ev.expand(args[1]) if len(args) > 1 else ""
    return ev.expand(",".join(args[2:])) if len(args) > 2 else ""


def _or(ev: Evaluation, args: list[str]) -> str:
    for arg in args:
        if value := ev.expand(arg).strip():
            return value
    return ""


def _and(ev: Evaluation, args: list[str]) -> str:
    value = ""
    for arg in args:
        if not (value := ev.expand(arg).strip()):
            return ""
    return value


@contextmanager
def _bound(ev: Evaluation, values: dict[str, str]) -> Iterator[None]:
    """Variables set for the length of a ``foreach`` step or a ``call``, then what they were put back."""
    saved = {name: ev.variables.get(name) for name in values}
    ev.variables.update({name: Variable(text, simple=True) for name, text in values.items()})
    try:
        yield
    finally:
        for name, var in saved.items():
            if var is None:
                ev.variables.pop(name, None)
            else:
                ev.variables[name] = var


def _foreach(ev: Evaluation, args: list[str]) -> str:
    name = ev.expand(args[0]).strip()
    out = []
    for word in _words(ev, args[1]):
        with _bound(ev, {name: word}):
            out.append(ev.expand(",".join(args[2:])))
    return " ".join(out)


def _call(ev: Evaluation, args: list[str]) -> str:
    name = ev.expand(args[0]).strip()
    params = {str(n): ev.expand(a) for n, a in enumerate(args[1:], start=1)}
    with _bound(ev, {**params, "0": name}):
        return ev.expand(f"$({name})")


def _unsure(what: str) -> Callable[[Evaluation, list[str]], str]:
    def run(ev: Evaluation, args: list[str]) -> str:
        ev.unsure.append(f"$({what} {','.join(args)[:60]}) not run")
        return ""

    return run


def _wildcard(ev: Evaluation, args: list[str]) -> str:
    found: list[str] = []
    for pattern in _words(ev, args[0]):
        base = ev.root if not os.path.isabs(pattern) else Path("/")
        found += sorted(str(p.relative_to(base)) if base == ev.root else str(p) for p in base.glob(pattern.lstrip("/")))
    return " ".join(found)


def _dir(word: str) -> str:
    return word[: word.rfind("/") + 1] if "/" in word else "./"


FUNCTIONS: dict[str, Callable[[Evaluation, list[str]], str]] = {
    "subst": lambda ev, a: ev.expand(",".join(a[2:])).replace(ev.expand(a[0]), ev.expand(a[1])),
    "patsubst": lambda ev, a: " ".join(
        _patsubst(ev.expand(a[0]).strip(), ev.expand(a[1]).strip(), w) for w in _words(ev, ",".join(a[2:]))
    ),
    "strip": lambda ev, a: " ".join(_words(ev, ",".join(a))),
    "findstring": lambda ev, a: ev.expand(a[0]) if ev.expand(a[0]) in ev.expand(",".join(a[1:])) else "",
    "filter": lambda ev, a: " ".join(
        w for w in _words(ev, ",".join(a[1:])) if any(_matches(p, w) for p in _words(ev, a[0]))
    ),
    "filter-out": lambda ev, a: " ".join(
        w for w in _words(ev, ",".join(a[1:])) if not any(_matches(p, w) for p in _words(ev, a[0]))
    ),
    "sort": lambda ev, a: " ".join(sorted(set(_words(ev, ",".join(a))))),
    "words": lambda ev, a: str(len(_words(ev, ",".join(a)))),
    "word": lambda ev, a: (lambda n, ws: ws[n - 1] if 0 < n <= len(ws) else "")(
        int(ev.expand(a[0]).strip() or 0), _words(ev, ",".join(a[1:]))
    ),
    "firstword": lambda ev, a: next(iter(_words(ev, ",".join(a))), ""),
    "lastword": lambda ev, a: (_words(ev, ",".join(a)) or [""])[-1],
    "dir": lambda ev, a: " ".join(_dir(w) for w in _words(ev, ",".join(a))),
    "notdir": lambda ev, a: " ".join(w.rsplit("/", 1)[-1] for w in _words(ev, ",".join(a))),
    "basename": lambda ev, a: " ".join(os.path.splitext(w)[0] for w in _words(ev, ",".join(a))),
    "suffix": lambda ev, a: " ".join(os.path.splitext(w)[1] for w in _words(ev, ",".join(a)) if "." in w),
    "addprefix": lambda ev, a: " ".join(ev.expand(a[0]).strip() + w for w in _words(ev, ",".join(a[1:]))),
    "addsuffix": lambda ev, a: " ".join(w + ev.expand(a[0]).strip() for w in _words(ev, ",".join(a[1:]))),
    "if": _if,
    "or": _or,
    "and": _and,
    "foreach": _foreach,
    "call": _call,
    "value": lambda ev, a: (ev.variables.get(ev.expand(a[0]).strip()) or Variable("", True)).text,
    "origin": lambda ev, a: "file" if ev.expand(a[0]).strip() in ev.variables else "undefined",
    "wildcard": _wildcard,
    "abspath": lambda ev, a: " ".join(os.path.normpath(w) for w in _words(ev, ",".join(a))),
    "realpath": lambda ev, a: " ".join(os.path.normpath(w) for w in _words(ev, ",".join(a))),
    "shell": _unsure("shell"),
    "eval": _unsure("eval"),
    "file": _unsure("file"),
    "error": _unsure("error"),
    "warning": lambda ev, a: "",
    "info": lambda ev, a: "",
}


def logical_lines(text: str) -> list[tuple[int, str, bool]]:
    """The lines make reads, each with its first line's number and whether it starts with a tab (a recipe line
    after a rule, an ordinary one elsewhere): continuations joined, comments dropped."""
    lines: list[tuple[int, str, bool]] = []
    pending: list[str] = []
    first = 0
    tab = False
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            first = number
            tab = raw.startswith("\t")
        if raw.endswith("\\") and not raw.endswith("\\\\"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        joined = " ".join(part.strip() for part in pending)
        pending = []
        code = _uncomment(joined).strip()
        if code:
            lines.append((first, code, tab))
    return lines


def _uncomment(line: str) -> str:
    """The line without its comment (a ``#`` not escaped and not inside a reference)."""
    for i, char in _outside(line):
        if char == "#" and (i == 0 or line[i - 1] != "\\"):
            return line[:i]
    return line.replace("\\#", "#")


@dataclass
class _Branch:
    """One open conditional: whether its current branch is taken, whether one was, and why it was skipped."""

    taken: bool
    done: bool
    why: str
    outer: bool  # the branch around it is taken


class Reader:
    """Evaluates Makefiles into one :class:`Evaluation`, following includes inside the tree."""

    def __init__(self, evaluation: Evaluation) -> None:
        self.ev = evaluation
        self.includes = 0

    def read(self, path: Path) -> None:
        """Evaluates the Makefile at ``path`` (a path inside the evaluation's root, or absolute)."""
        full = path if path.is_absolute() else self.ev.root / path
        try:
            # the tree's own file, a regular one: not through a link out of it (a Makefile outside said what was built)
            text = supplied.read(full, MAX_MAKEFILE_BYTES, self.ev.root).decode("utf-8", "replace")
        except OSError as error:
            self.ev.unsure.append(f"{path}: {error.strerror or error}")
            return
        shown = str(full.relative_to(self.ev.root)) if full.is_relative_to(self.ev.root) else str(full)
        stack: list[_Branch] = []
        define: str | None = None
        rule = False  # after a rule line, tab lines are its recipe until another statement
        for number, line, tab in logical_lines(text):
            if tab and rule:
                continue
            if define is not None:
                if line.split()[0] == "endef":
                    define = None
                continue
            if line.split()[0] == "define":
                define = line
                continue
            taken = all(b.taken for b in stack)
            if self._conditional(line, stack, taken, f"{shown}:{number}"):
                continue
            why = next((b.why for b in stack if not b.taken), "")
            rule = self._statement(line, shown, number, taken, why)

    def _conditional(self, line: str, stack: list[_Branch], taken: bool, where: str) -> bool:
        """Handles ``if*``/``else``/``endif``; False for any other line."""
        word = line.split()[0]
        if word == "endif":
            if stack:
                stack.pop()
            return True
        if word == "else" and stack:
            branch = stack[-1]
            test = _CONDITIONAL.match(line[4:].strip())
            if not branch.outer:
                return True
            if branch.done:
                branch.taken, branch.why = False, f"{where}: an earlier branch of its conditional was taken"
            elif test:
                branch.taken, branch.why = self._test(test.group(1), test.group(2), where)
                branch.done = branch.taken
            else:
                branch.taken, branch.done, branch.why = True, True, ""
            return True
        if match := _CONDITIONAL.match(line):
            if taken:
                holds, why = self._test(match.group(1), match.group(2), where)
                stack.append(_Branch(holds, holds, why, outer=True))
            else:
                stack.append(_Branch(False, True, "", outer=False))
            return True
        return False

    def _test(self, kind: str, rest: str, where: str) -> tuple[bool, str]:
        """Whether a conditional holds, and the reason a skipped branch gives (the test and the values it read)."""
        written = f"{kind} {rest}"
        if kind in ("ifdef", "ifndef"):
            name = self.ev.expand(rest).strip()
            holds = bool(self.ev.expand(f"$({name})").strip()) == (kind == "ifdef")
            return holds, f"{where}: `{written}` ({_said(self.ev, rest)})"
        left, right = _operands(rest)
        holds = (self.ev.expand(left).strip() == self.ev.expand(right).strip()) == (kind == "ifeq")
        return holds, f"{where}: `{written}` ({_said(self.ev, rest)})"

    def _statement(self, line: str, path: str, number: int, taken: bool, why: str) -> bool:
        """An assignment or an include; rules and anything else are not what kbuild's lists are made of. True
        for a rule (the tab lines after it are its recipe)."""
        words = line.split(None, 1)
        if words[0] in ("include", "-include", "sinclude") and len(words) > 1:
            if taken:
                self._include(words[0], words[1])
            return False
        exported = False
        while words and words[0] in _MODIFIERS and len(words) > 1:
            exported = exported or words[0] == "export"
            line = words[1]
            words = line.split(None, 1)
        match = _split_assignment(line)
        if match is None:
            if exported and taken:
                for name in self.ev.expand(line).split():
                    self.ev.variables.setdefault(name, Variable("", simple=False)).exported = True
            return ":" in line
        written, op, value = match
        name = self.ev.expand(written).strip()
        added = tuple(self.ev.expand(value).split()) if _listed(name) or _listed(written) else ()
        if added or _listed(written):
            self.ev.assignments.append(Assignment(path, number, written, name, added, "" if taken else why))
        if taken:
            self.ev.assign(name, op, value, exported=exported)
        return False

    def _include(self, how: str, names: str) -> None:
        if self.includes >= MAX_DEPTH:
            self.ev.unsure.append(f"more than {MAX_DEPTH} includes")
            return
        for name in self.ev.expand(names).split():
            target = Path(os.path.normpath(name))
            full = (target if target.is_absolute() else self.ev.root / target).resolve()
            if not full.is_relative_to(self.ev.root.resolve()):  # a hostile tree's include of any other file
                self.ev.unsure.append(f"include {name}: outside the tree, not read")
                continue
            if not full.is_file():
                if how == "include":
                    self.ev.unsure.append(f"include {name}: not in the tree")
                continue
            self.includes += 1
            self.read(full)


def _split_assignment(line: str) -> tuple[str, str, str] | None:
    """``(left, operator, right)`` of an assignment, or None for a rule or a bare word (a ``:`` before the first
    assignment operator, outside references, makes a rule)."""
    for i, char in _outside(line):
        if char in ":+?!=":
            match = _ASSIGN.match(line, i)
            if match:
                return line[:i].strip(), match.group(1), line[match.end() :].strip()
            if char == ":":
                return None
    return None


def _operands(rest: str) -> tuple[str, str]:
    """The two operands of ``ifeq (a,b)`` or ``ifeq "a" "b"``."""
    rest = rest.strip()
    if rest.startswith("("):
        inner = rest[1 : _closing(rest, 0)]
        args = _arguments(inner)
        return args[0], ",".join(args[1:])
    quoted = re.findall(r"\"([^\"]*)\"|'([^']*)'", rest)
    values = [a or b for a, b in quoted] + ["", ""]
    return values[0], values[1]


def _said(ev: Evaluation, text: str) -> str:
    """The values of the CONFIG_ symbols a test read, as a reason says them."""
    symbols = sorted(set(re.findall(r"CONFIG_\w+", text)))
    if not symbols:
        return "the test is false"
    return ", ".join(f"{s}={ev.expand(f'$({s})')}" if ev.expand(f"$({s})") else f"{s} is not set" for s in symbols)


_LISTS = re.compile(r"^(obj|lib|extra|subdir|core|drivers|init|net|libs|virt)-|-(objs|y|m|n|)$|-\$\(CONFIG_\w+\)$")


def _listed(name: str) -> bool:
    """Whether a variable may be one of kbuild's object lists (``obj-y``, ``foo-objs``, ``foo-$(CONFIG_X)``)."""
    return bool(_LISTS.search(name))
