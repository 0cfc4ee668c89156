"""The workspace tools the model may call (`tool_request`), answered by the editor side.

The model asks for more code than its unit: `read_lines`, `grep`, `find_definition`, `find_references`, each
narrowed by an optional `path`. Its requests are untrusted (the audited code can try to steer it), so every tool
is read-only and confined to the workspace by the rules of ``k3lsp.tools.confine`` (no `..`, absolute path, hidden
component, symlink out, hard-linked, oversized or binary file, nothing in a secret place, whatever its
spelling). `grep` and `find_references` search with ripgrep (``k3lsp.tools.search``); `find_definition` and the
callers `find_references` names come from the workspace's symbol index (``k3lsp.tools.symbols``). Every answer's
first line says what it covered (files searched and how long, the index's size and age, or that it stopped at
the deadline or the output limit): never a bare "not found" after an incomplete search. Every answer is cut to
`MAX_RESULT_CHARS` / `MAX_RESULT_LINES`. A refusal is an ordinary result text (`run_tool` returns ok=False),
which the model reads and can act on; no exception escapes to the server. A file outside every workspace folder
gets no tools at all (``answers.ToolAnswerer.answer``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k3lsp.tools import confine, ranking, search, symbols
from k3lsp.tools.confine import ToolError

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 16 * 1024
MAX_RESULT_LINES = 200
MAX_PATTERN_CHARS = 500
MAX_DEFINITIONS = 5  # shown with their code; further ones by place only
MAX_PLACES = 20  # definitions listed by place
MAX_DEFINITION_LINES = 60  # of one definition's code
SEARCH_SECONDS = (
    3.0  # searches stop here, and a lookup waits no longer for the index: the model waits, and so does the audit
)
GREP_SECONDS = SEARCH_SECONDS + 3.0  # the pure-Python search's child is killed here (one line can backtrack forever)
TOOL_SECONDS = GREP_SECONDS + 2.0  # the tool answerer's bound on any tool call: answered with a refusal after this

INDEX_LINES = MAX_RESULT_LINES + MAX_PLACES  # lines a search from the occurrence index reads (some are definitions)
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_WORD_PATTERN = re.compile(r"\\b([A-Za-z_][A-Za-z0-9_]{0,254})\\b")


class _Output:
    """Collects result lines up to the size limits and says when it cut."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.chars = 0
        self.full = False

    def add(self, line: str) -> bool:
        if len(line) > search.MAX_LINE_CHARS:
            line = line[: search.MAX_LINE_CHARS] + " …"
        if len(self.lines) >= MAX_RESULT_LINES or self.chars + len(line) + 1 > MAX_RESULT_CHARS:
            self.full = True
            return False
        self.lines.append(line)
        self.chars += len(line) + 1
        return True

    def text(self, note: str = "") -> str:
        """The collected lines, then `note`, or a generic note when the limits cut the result."""
        tail = [note] if note else ["… (result truncated at the size limit)"] if self.full else []
        return "\n".join(self.lines + tail)


# --- the tools --------------------------------------------------------------------------------------------


def read_lines(root: str | os.PathLike[str], path: str, start: int, end: int) -> str:
    """Lines start..end (1-based, inclusive) of a workspace file, numbered."""
    if start < 1 or end < start:
        raise ToolError(f"bad line range {start}-{end}: need 1 <= start <= end")
    real = confine.resolve(root, path)
    lines = confine.read_text(real, path).removesuffix("\n").split("\n")
    if start > len(lines):
        raise ToolError(f"{path} has only {len(lines)} lines")
    out = _Output()
    out.add(f"{path}:{start}-{min(end, len(lines))} of {len(lines)} lines")
    last = start - 1
    for n in range(start, min(end, len(lines)) + 1):
        if not out.add(f"{n:>6}  {lines[n - 1]}"):
            break
        last = n
    return out.text(f"(stopped at line {last}; ask for {last + 1}-{end} for more)" if out.full else "")


def _under(root: str | os.PathLike[str], path: str | None) -> tuple[Path | None, str]:
    """A tool's `path` argument as (real path or None for the whole workspace, " under PATH" for its answer)."""
    if path is None or path.strip() in ("", "."):
        return None, ""
    real = confine.resolve(root, path)
    return real, f" under {real.relative_to(Path(root).resolve()).as_posix() or '.'}"


def _symbol(symbol: str) -> str:
    if not _SYMBOL.fullmatch(symbol):
        raise ToolError(f"{symbol!r} is not a C identifier")
    return symbol


def _index(root: str | os.PathLike[str]) -> tuple[symbols.SymbolIndex, symbols.Status]:
    """The workspace's index, refreshed in the background; a first build is waited for up to the deadline."""
    index = symbols.index_for(root)
    index.refresh()
    if not index.status().complete:
        index.wait(SEARCH_SECONDS)
    return index, index.status()


def find_definition(
    root: str | os.PathLike[str], symbol: str, path: str | None = None, caller: str | None = None
) -> str:
    """Where a function, macro, struct/union/enum, typedef or global is defined, from the symbol index: the
    definitions with their code, then the declarations (prototypes, extern variables); ``caller``, the
    workspace-relative file under audit, puts the definitions it most likely uses first (``ranking``)."""
    _symbol(symbol)
    real, where = _under(root, path)
    index, status = _index(root)
    base = Path(root).resolve()
    under = None if real is None else real.relative_to(base).as_posix()
    tags = index.definitions(symbol, under, _caller(base, caller))
    defined = [t for t in tags if not t.declaration]
    declared = len(tags) - len(defined)
    if not tags:
        missing = f"no definition of {symbol}{where} in {status.describe()}"
        return missing if status.complete else f"{missing}: ask again shortly, or grep for it"
    counts = search.counted(len(defined), "definition") + (
        f" and {search.counted(declared, 'declaration')}" if declared else ""
    )
    out = _Output()
    out.add(f"{counts} of {symbol}{where}, from {status.describe()}")
    secrets = confine.Secrets()
    for n, tag in enumerate(tags[:MAX_PLACES]):
        end = tag.end or tag.line
        out.add(f"{tag.path}:{tag.line}-{end} ({tag.kind})")
        if n < MAX_DEFINITIONS and not _code(base, tag, out, secrets):
            break
    if len(tags) > MAX_PLACES:
        out.add(f"… {len(tags) - MAX_PLACES} more: narrow with path")
    return out.text()


def _caller(base: Path, caller: str | None) -> ranking.Caller | None:
    """The audited file as ranking reads it; its includes only when the sandbox lets it be read."""
    if caller is None:
        return None
    try:
        return ranking.Caller.of(caller, confine.read_text(confine.resolve(base, caller), caller))
    except ToolError:  # gone, too big, outside: its place still counts
        return ranking.Caller(caller)


def _code(base: Path, tag: symbols.Tag, out: _Output, secrets: confine.Secrets) -> bool:
    """A definition's lines, numbered (the file read again through the sandbox); False when the output is full."""
    try:
        lines = confine.read_text(confine.resolve(base, tag.path, secrets), tag.path).split("\n")
    except ToolError as e:
        return out.add(f"  ({e})")
    if tag.line > len(lines):  # the file changed since it was indexed; the next refresh will see it
        return out.add(f"  ({tag.path} has {len(lines)} lines now: the index is behind; ask again shortly)")
    last = min(tag.end or tag.line + MAX_DEFINITION_LINES // 3, len(lines), tag.line + MAX_DEFINITION_LINES - 1)
    for n in range(tag.line, last + 1):
        if not out.add(f"{n:>6}  {lines[n - 1]}"):
            return False
    if tag.end is not None and tag.end > last:
        out.add(f"  … (read_lines {tag.path} {last + 1}-{tag.end} for the rest)")
    return out.add("")


def find_references(root: str | os.PathLike[str], symbol: str, path: str | None = None) -> str:
    """The lines of C and C++ sources that use a symbol (a whole-word search with ripgrep, its definitions left
    out), each named after the function it is in (from the symbol index): the callers of a function."""
    _symbol(symbol)
    real, where = _under(root, path)
    found, uses, callers, status = references(root, symbol, real)
    files = len({hit.path for hit in uses})
    functions = len({(c.path, c.name) for c in callers if c is not None})
    more = "+" if found.stopped else ""
    out = _Output()
    out.add(
        f"{search.counted(len(uses), 'reference', more)} to {symbol}{where} in {search.counted(files, 'file')} and "
        f"{search.counted(functions, 'function')} "
        f"({found.engine}: {found.coverage(SEARCH_SECONDS)}; functions named by {status.describe()})"
    )
    for hit, caller in zip(uses, callers, strict=True):
        inside = f" in {caller.name}" if caller is not None else ""
        if not out.add(f"{hit.path}:{hit.line}{inside}: {hit.text.strip()}"):
            break
    return out.text(f"… {len(uses) - len(out.lines) + 1} more not shown: narrow with path" if out.full else "")


def references(
    root: str | os.PathLike[str], symbol: str, real: Path | None = None
) -> tuple[search.Search, list[search.Hit], list[symbols.Tag | None], symbols.Status]:
    """What ``find_references`` answers from: the search, the uses (its definitions left out), the function each
    use is in (None: outside every function the index knows) and the index's status. ``real``: only under it."""
    index = symbols.index_for(root)
    index.refresh()
    found = _word_search(root, index, symbol, real, sources=True)
    defined = {(t.path, t.line) for t in index.definitions(symbol)}
    uses = [hit for hit in found.hits if (hit.path, hit.line) not in defined]
    return found, uses, index.enclosing([(hit.path, hit.line) for hit in uses]), index.status()


def _word_search(
    root: str | os.PathLike[str], index: symbols.SymbolIndex, word: str, real: Path | None, *, sources: bool
) -> search.Search:
    """A whole-word search: from the occurrence index once it is whole (the files that hold the word, read
    until the answer is full), else with ripgrep over every file."""
    if not index.words_ready():
        return search.search(
            root, word, real, seconds=SEARCH_SECONDS, kill_after=GREP_SECONDS, word=True, sources=sources
        )
    base = Path(root).resolve()
    under = None if real is None or real == base else real.relative_to(base).as_posix()
    paths = index.files_with(word, under, sources=sources)
    return search.indexed(base, paths, word, SEARCH_SECONDS, INDEX_LINES)


def grep(root: str | os.PathLike[str], pattern: str, path: str | None = None) -> str:
    """Lines matching a regular expression in a file or directory of the workspace (`path:line: text`), with
    ripgrep (a pure-Python search only when it is missing, and the answer says so)."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"pattern must be 1..{MAX_PATTERN_CHARS} characters")
    real, where = _under(root, path)
    word = _WORD_PATTERN.fullmatch(pattern)
    if word is not None:  # `\bname\b`: a whole word, which the occurrence index answers
        index = symbols.index_for(root)
        index.refresh()
        found = _word_search(root, index, word.group(1), real, sources=False)
    else:
        found = search.search(root, pattern, real, seconds=SEARCH_SECONDS, kill_after=GREP_SECONDS)
    more = "+" if found.stopped else ""
    out = _Output()
    out.add(
        f"{search.counted(len(found.hits), 'matching line', more)} for {pattern!r} ({found.mode}){where} with "
        f"{found.engine}: {found.coverage(SEARCH_SECONDS)}"
    )
    for hit in found.hits:
        if not out.add(f"{hit.path}:{hit.line}: {hit.text.strip()}"):
            break
    shown = len(out.lines) - 1
    return out.text(f"… {len(found.hits) - shown} more not shown: narrow the pattern or the path" if out.full else "")


# --- dispatch ---------------------------------------------------------------------------------------------


def _arg(args: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ToolError(f"argument {name!r} must be a {kind.__name__}")
    return value


def _symbol_tool(tool: Callable[[Path, str, str | None], str]) -> Tool:
    return lambda root, a, _: tool(root, _arg(a, "symbol", str), _arg(a, "path", str, required=False))


Tool = Callable[[Path, dict[str, Any], str | None], str]  # (root, arguments, the file under audit)
TOOLS: dict[str, tuple[frozenset[str], Tool]] = {
    "read_lines": (
        frozenset({"path", "start", "end"}),
        lambda root, a, _: read_lines(root, _arg(a, "path", str), _arg(a, "start", int), _arg(a, "end", int)),
    ),
    "find_definition": (
        frozenset({"symbol", "path"}),
        lambda root, a, caller: find_definition(
            root, _arg(a, "symbol", str), _arg(a, "path", str, required=False), caller
        ),
    ),
    "find_references": (frozenset({"symbol", "path"}), _symbol_tool(find_references)),
    "grep": (
        frozenset({"pattern", "path"}),
        lambda root, a, _: grep(root, _arg(a, "pattern", str), _arg(a, "path", str, required=False)),
    ),
}


def run_tool(root: str | os.PathLike[str], name: str, args: Any, caller: str | None = None) -> tuple[bool, str]:
    """Answer one tool request: (True, result) or (False, why it was refused). Never raises. ``caller``: the
    workspace-relative file whose audit asks (find_definition ranks by it)."""
    spec = TOOLS.get(name)
    if spec is None:
        return False, f"unknown tool {name!r}; available: {', '.join(sorted(TOOLS))}"
    if not isinstance(args, dict):
        return False, f"{name}: arguments must be an object"
    unknown = set(args) - spec[0]
    if unknown:
        return False, f"{name}: unknown arguments {sorted(map(str, unknown))}; expected {sorted(spec[0])}"
    try:
        return True, spec[1](Path(root), args, caller)
    except ToolError as e:
        return False, f"{name}: {e}"
    except Exception as e:  # an unexpected failure is still just an answer the model reads
        log.exception("tool %s failed", name)
        return False, f"{name} failed: {e.__class__.__name__}: {e}"
