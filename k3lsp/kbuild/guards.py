"""The ``#if`` guards around a line of C, decided by one configuration where they can be.

Inside a built file, a function under ``#ifdef CONFIG_X`` is compiled only when ``CONFIG_X=y``: kconfig's
``autoconf.h`` defines ``CONFIG_X`` as 1 for ``y``, ``CONFIG_X_MODULE`` for ``m``, the value for a number or a
string, and nothing for an unset symbol; ``IS_ENABLED``/``IS_BUILTIN``/``IS_MODULE`` read both. A test is
evaluated with three values (true, false, unknown): a name that is neither a config symbol, ``MODULE`` (defined
when the file is built as a module) nor a macro this file defined earlier is unknown, and so is what depends on
it, unless the rest of the test decides it (``0 && FOO``). An include guard (``#ifndef X`` then ``#define X``)
holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3lsp.kbuild.config import Config
from k3lsp.kbuild.state import Kind, State

_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_]\w*|&&|\|\||<<|>>|<=|>=|==|!=|[-+*/%<>!~&|^?:(),])")
_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"), ("+", "-")]
_BINARY += [("*", "/", "%")]
_TEST_MACROS = {"IS_ENABLED": ("y", "m"), "IS_BUILTIN": ("y",), "IS_MODULE": ("m",)}

Value = int | None  # None: cannot be told


@dataclass
class _Frame:
    """One open ``#if``: the value of the branch being read, whether an earlier branch held, and its reason."""

    value: Value
    earlier: Value
    why: str


class Guards:
    """The guards of one file under one configuration: :meth:`at` gives a line's state."""

    def __init__(self, text: str, config: Config, module: bool | None = None) -> None:
        self.config = config
        self.macros: dict[str, Value] = {"MODULE": 1} if module else {}
        self.undefined: set[str] = {"MODULE"} if module is False else set()
        self.lines: list[State | None] = []  # per line as the compiler cuts them: None when every guard holds
        lines, self._numbers = _compiler_lines(text)
        self._starts = [i for i, n in enumerate(self._numbers) if i == 0 or self._numbers[i - 1] != n]
        self._scan(lines)

    def at(self, line: int) -> State | None:
        """The guards' verdict on a 1-based line (counted as the units count them, at ``\\n`` alone), at its
        start: None when they all hold, else not built or unknown with the directive that decides it."""
        return self.lines[self._starts[line - 1]] if 0 < line <= len(self._starts) else None

    def _scan(self, lines: list[str]) -> None:
        stack: list[_Frame] = []
        number = 0
        while number < len(lines):
            first = number
            text = lines[number]
            while text.endswith("\\") and number + 1 < len(lines):
                number += 1
                text = text[:-1] + " " + lines[number]
            number += 1
            self.lines += [_verdict(stack)] * (number - first)
            directive = _DIRECTIVE.match(text)
            if directive:
                rest = _strip_comments(directive.group(2))
                self._directive(directive.group(1), rest, stack, self._numbers[first], lines, number)

    def _directive(self, name: str, rest: str, stack: list[_Frame], line: int, lines: list[str], after: int) -> None:
        active = _verdict(stack) is None
        where = f"line {line}: `{f'#{name} {rest}'.strip()}`"
        if name in ("if", "ifdef", "ifndef"):
            value = self._test(name, rest, lines, after)
            stack.append(_Frame(value, value, f"{where} ({self._said(rest)})"))
        elif name == "elif" and stack:
            frame = stack[-1]
            value = 0 if frame.earlier == 1 else self._test("if", rest, lines, after)
            if frame.earlier is None and value != 0:
                value = None
            frame.value, frame.why = value, f"{where} ({self._said(rest)})"
            frame.earlier = _or(frame.earlier, value)
        elif name == "else" and stack:
            frame = stack[-1]
            frame.value = None if frame.earlier is None else int(not frame.earlier)
            frame.why = f"{where} (the branch before it {'may hold' if frame.earlier is None else 'holds'})"
        elif name == "endif" and stack:
            stack.pop()
        elif name == "define" and active and (match := re.match(r"(\w+)(\s+(\S.*))?$", rest)):
            self.macros[match.group(1)] = _number(match.group(3) or "1")
            self.undefined.discard(match.group(1))
        elif name == "undef" and active and rest.split():
            self.macros.pop(rest.split()[0], None)
            self.undefined.add(rest.split()[0])

    def _test(self, name: str, rest: str, lines: list[str], after: int) -> Value:
        if name == "if":
            return _Expression(rest, self).value()
        symbol = rest.split()[0] if rest.split() else ""
        defined = self._defined(symbol)
        if name == "ifndef" and defined is None and _defines_next(lines, after, symbol):
            return 1  # an include guard
        return defined if name == "ifdef" or defined is None else int(not defined)

    def _defined(self, name: str) -> Value:
        if name in self.undefined or name in self.macros:
            return int(name in self.macros)
        if name.startswith("CONFIG_"):
            return int(self._macro(name) is not None)
        return None

    def _macro(self, name: str) -> str | None:
        """What autoconf.h defines ``CONFIG_X`` as (None: not defined)."""
        if name.endswith("_MODULE") and self.config.values.get(name[: -len("_MODULE")]) == "m":
            return "1"
        value = self.config.values.get(name)
        if value in (None, "n", "m"):
            return None
        return "1" if value == "y" else value

    def identifier(self, name: str) -> Value:
        """A name's value in a test: a config symbol's, a macro of this file's, else unknown."""
        if name in self.undefined or name in self.macros:
            return self.macros.get(name, 0)
        if name.startswith("CONFIG_"):
            return _number(self._macro(name) or "0")
        return None

    def test_macro(self, name: str, symbol: str) -> Value:
        """``IS_ENABLED(CONFIG_X)`` and its kin."""
        if not symbol.startswith("CONFIG_"):
            return None
        return int(self.config.values.get(symbol) in _TEST_MACROS[name])

    def _said(self, rest: str) -> str:
        symbols = sorted(set(re.findall(r"CONFIG_\w+", rest)))
        unknown = [n for n in re.findall(r"\b[A-Za-z_]\w*", rest) if self.identifier(n) is None]
        unknown = [n for n in unknown if n not in ("defined", *_TEST_MACROS) and not n.startswith("CONFIG_")]
        said = [self.config.said(s) for s in symbols]
        if re.search(r"\bMODULE\b", rest) and self._defined("MODULE") is not None:
            said.append("the file is built as a module" if self._defined("MODULE") else "the file is built in")
        if unknown:
            said.append(f"{', '.join(sorted(set(unknown)))}: not a config symbol")
        return "; ".join(said) or "a constant"


def _verdict(stack: list[_Frame]) -> State | None:
    """The state of a line under the open frames: not built when one is false, unknown when one cannot be told."""
    false = next((f for f in stack if f.value == 0), None)
    if false is not None:
        return State(Kind.NOT_BUILT, false.why)
    unsure = next((f for f in stack if f.value is None), None)
    return State(Kind.UNKNOWN, unsure.why) if unsure is not None else None


def _compiler_lines(text: str) -> tuple[list[str], list[int]]:
    """``text`` cut as gcc cuts it, at ``\\n``, ``\\r\\n`` and a lone ``\\r`` (a form feed, ``\\v``, ``\\x85``
    or U+2028, where ``str.splitlines`` also cuts, stay in their line), and the 1-based number of each piece's
    line as the units count lines, at ``\\n`` alone: a count of its own would judge a unit by another line."""
    lines: list[str] = []
    numbers: list[int] = []
    for number, physical in enumerate(text.split("\n"), 1):
        pieces = physical.removesuffix("\r").split("\r")
        lines += pieces
        numbers += [number] * len(pieces)
    return lines, numbers


def _defines_next(lines: list[str], start: int, symbol: str) -> bool:
    """Whether the next directive after ``start`` defines ``symbol`` (an include guard)."""
    for text in lines[start : start + 20]:
        directive = _DIRECTIVE.match(text)
        if directive:
            return directive.group(1) == "define" and directive.group(2).split()[:1] == [symbol]
    return False


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?(\*/|$)|//.*$", " ", text).strip()


def _number(text: str) -> Value:
    text = text.strip().rstrip("uUlL")
    try:
        return int(text, 0)
    except ValueError:
        return None


def _or(a: Value, b: Value) -> Value:
    if a or b:
        return 1
    return None if a is None or b is None else 0


class _Expression:
    """A ``#if`` expression evaluated with unknown values (precedence climbing over C's operators)."""

    def __init__(self, text: str, guards: Guards) -> None:
        self.tokens = _TOKEN.findall(text)
        self.guards = guards
        self.at = 0

    def value(self) -> Value:
        try:
            result = self._conditional()
        except (IndexError, ValueError, ZeroDivisionError):
            return None
        return result if self.at == len(self.tokens) else None

    def _peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def _take(self, expected: str | None = None) -> str:
        token = self.tokens[self.at]
        if expected is not None and token != expected:
            raise ValueError(token)
        self.at += 1
        return token

    def _conditional(self) -> Value:
        test = self._binary(0)
        if self._peek() != "?":
            return test
        self._take("?")
        yes = self._conditional()
        self._take(":")
        no = self._conditional()
        if test is None:
            return yes if yes == no else None
        return yes if test else no

    def _binary(self, level: int) -> Value:
        if level == len(_BINARY):
            return self._unary()
        left = self._binary(level + 1)
        while self._peek() in _BINARY[level]:
            operator = self._take()
            right = self._binary(level + 1)
            left = _apply(operator, left, right)
        return left

    def _unary(self) -> Value:
        token = self._take()
        if token in ("!", "-", "+", "~"):
            operand = self._unary()
            if operand is None:
                return None
            return {"!": int(not operand), "-": -operand, "+": operand, "~": ~operand}[token]
        if token == "(":
            inner = self._conditional()
            self._take(")")
            return inner
        if token == "defined":
            parenthesised = self._peek() == "("
            if parenthesised:
                self._take("(")
            name = self._take()
            if parenthesised:
                self._take(")")
            return self.guards._defined(name)
        if token in _TEST_MACROS:
            self._take("(")
            name = self._take()
            self._take(")")
            return self.guards.test_macro(token, name)
        if token[0].isdigit():
            return _number(token)
        if self._peek() == "(":  # a function-like macro this evaluator does not know
            depth = 0
            while True:
                t = self._take()
                depth += {"(": 1, ")": -1}.get(t, 0)
                if depth == 0:
                    return None
        return self.guards.identifier(token)


def _apply(operator: str, left: Value, right: Value) -> Value:
    """One binary operator with unknowns: ``&&`` and ``||`` decided by one side when it can decide them."""
    if operator == "&&":
        return 0 if left == 0 or right == 0 else (None if left is None or right is None else 1)
    if operator == "||":
        return _or(left, right)
    if left is None or right is None:
        return None
    return {
        "|": lambda: left | right,
        "^": lambda: left ^ right,
        "&": lambda: left & right,
        "==": lambda: int(left == right),
        "!=": lambda: int(left != right),
        "<": lambda: int(left < right),
        ">": lambda: int(left > right),
        "<=": lambda: int(left <= right),
        ">=": lambda: int(left >= right),
        "<<": lambda: left << right,
        ">>": lambda: left >> right,
        "+": lambda: left + right,
        "-": lambda: left - right,
        "*": lambda: left * right,
        "/": lambda: int(left / right),
        "%": lambda: left % right,
    }[operator]()
