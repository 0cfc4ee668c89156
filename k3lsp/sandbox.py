"""The workspace tools the model may call (`tool_request`), answered by the editor side.

The model asks for more code than its unit: `read_lines`, `find_definition`, `grep`. Its requests are
untrusted (the audited code can try to steer it), so every tool is read-only and confined to the
workspace root: no `..`, no absolute paths, no hidden component (`.ssh`, `.git`, `.env`), no symlink that
resolves outside the root or to a hidden file (or loops), no file with other hard links (one may be a file
outside the workspace), no file over `MAX_FILE_BYTES`, no binary file (a NUL anywhere), and nothing in a
known secret place, wherever the workspace is (a workspace at the home folder): the key and cache
directories of k3lsp and k3-backend, macOS's ~/Library folders of credentials (`LIBRARY_SECRETS`), and
secret-key file names (`SECRET_NAMES`). Every answer is cut to `MAX_RESULT_CHARS` / `MAX_RESULT_LINES`. A refusal is an
ordinary result text (`run_tool` returns ok=False), which the model reads and can act on; no exception
escapes to the server. A file outside every workspace folder gets no tools at all (``Auditor._tool``).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from k3lsp import units
from k3lsp.wire import cache, isolated, keys

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_RESULT_CHARS = 16 * 1024
MAX_RESULT_LINES = 200
MAX_LINE_CHARS = 400  # one minified line must not eat the whole answer
MAX_FILES = 20_000  # files visited by one grep / find_definition
MAX_PATTERN_CHARS = 500
MAX_DEFINITIONS = 5
SEARCH_SECONDS = 3.0  # grep and find_definition stop here: the model waits, and so does the audit
GREP_SECONDS = SEARCH_SECONDS + 3.0  # grep's child process is killed here (one line can backtrack forever)
TOOL_SECONDS = GREP_SECONDS + 2.0  # the auditor's bound on any tool call: answered with a refusal after this
C_SUFFIXES = (".c", ".h")
# macOS ~/Library folders holding credentials and private data (not Mobile Documents: iCloud Drive may hold code).
LIBRARY_SECRETS = (
    "Keychains",
    "Cookies",
    "Application Support",
    "Containers",
    "Group Containers",
    "Mail",
    "Messages",
    "Safari",
)
# Private keys and key stores, by name: never code to audit, wherever they lie.
SECRET_NAMES = (
    "*.key_secret",
    "*.pem",
    "*.p12",
    "*.pfx",
    "*.kdbx",
    "*.keychain",
    "*.keychain-db",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
)

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


class ToolError(Exception):
    """A refused or failed tool call; its message is what the model reads."""


# --- the sandbox ------------------------------------------------------------------------------------------


def secret_places() -> tuple[Path, ...]:
    """Directories whose files never reach the model, even inside the workspace: this machine's k3lsp and
    k3-backend keys, the result cache, and macOS's ~/Library folders of credentials (keychains, cookies, mail)."""
    places = (
        keys.default_dir("k3lsp"),
        keys.default_dir("k3-backend"),
        cache.default_path().parent,
        *(Path.home() / "Library" / name for name in LIBRARY_SECRETS),
    )
    return tuple(Path(os.path.realpath(p)) for p in places)


def _secret(real: Path, places: tuple[Path, ...]) -> bool:
    return any(fnmatch.fnmatch(real.name, pattern) for pattern in SECRET_NAMES) or any(
        real.is_relative_to(place) for place in places
    )


def resolve(root: str | os.PathLike[str], path: Any) -> Path:
    """The real path of a workspace-relative path, refusing anything that leaves the workspace."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty workspace-relative string")
    if "\0" in path:
        raise ToolError("path contains a NUL byte")
    posix = path.replace("\\", "/")
    rel = PurePosixPath(posix)
    if rel.is_absolute() or re.match(r"^[A-Za-z]:", posix):
        raise ToolError(f"{path}: absolute paths are not allowed; give a path relative to the workspace root")
    if ".." in rel.parts:
        raise ToolError(f"{path}: '..' is not allowed; paths stay inside the workspace")
    if _hidden(rel):  # also what `_files` never walks into
        raise ToolError(f"{path}: hidden files and directories are not available to the model")
    base = Path(root).resolve()
    try:
        real = (base / rel).resolve(strict=True)
    except FileNotFoundError:
        raise ToolError(f"{path}: no such file in the workspace") from None
    except (OSError, RuntimeError) as e:  # ELOOP: a symlink loop
        raise ToolError(f"{path}: cannot be resolved ({e.__class__.__name__}: symlink loop?)") from None
    if not real.is_relative_to(base):
        raise ToolError(f"{path}: resolves outside the workspace (symlink); refused")
    if _hidden(real.relative_to(base)):
        raise ToolError(f"{path}: resolves to a hidden file (symlink); refused")
    if _secret(real, secret_places()):
        raise ToolError(f"{path}: keys and other secrets are not available to the model")
    return real


def _hidden(rel: PurePosixPath | Path) -> bool:
    """A path with a dot-component: .ssh, .git, .env hold secrets, not code to audit."""
    return any(part.startswith(".") for part in rel.parts)


def _read_bytes(real: Path, shown: str) -> bytes:
    """A workspace file's bytes, refusing directories, hard-linked, large and binary files."""
    if not real.is_file():
        raise ToolError(f"{shown}: not a regular file")
    info = real.stat()
    if info.st_nlink > 1:  # the other name may be anywhere on the disk, e.g. a linked ~/.ssh/id_rsa
        raise ToolError(f"{shown}: has other hard links, so it may be a file from outside the workspace; refused")
    if info.st_size > MAX_FILE_BYTES:
        raise ToolError(f"{shown}: {info.st_size} bytes is over the {MAX_FILE_BYTES}-byte limit")
    data = real.read_bytes()
    if b"\0" in data:
        raise ToolError(f"{shown}: binary file")
    return data


def _read_text(real: Path, shown: str) -> str:
    return _read_bytes(real, shown).decode("utf-8", "replace")


def _files(root: Path, under: Path, suffixes: tuple[str, ...] | None) -> Iterator[tuple[Path, str]]:
    """Regular files under a directory, sorted, skipping hidden files and directories and anything that
    leaves the workspace; yields (real path, workspace-relative posix path)."""
    count = 0
    places = secret_places()
    for dirpath, dirnames, filenames in os.walk(under, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or (suffixes is not None and not name.endswith(suffixes)):
                continue
            count += 1
            if count > MAX_FILES:
                return
            try:
                real = Path(dirpath, name).resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            if (
                real.is_relative_to(root)
                and not _hidden(real.relative_to(root))
                and not _secret(real, places)
                and real.is_file()
            ):
                yield real, real.relative_to(root).as_posix()


class _Output:
    """Collects result lines up to the size limits and says when it cut."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.chars = 0
        self.full = False

    def add(self, line: str) -> bool:
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " …"
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
    real = resolve(root, path)
    lines = _read_text(real, path).removesuffix("\n").split("\n")
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


def find_definition(root: str | os.PathLike[str], symbol: str) -> str:
    """Where a function, macro, struct/union/enum, typedef or global is defined in the workspace's C files.

    A cheap text scan picks the files that mention the symbol; only those are parsed (units.parse),
    so a large tree costs one read per file and a parse per candidate.
    """
    if not _SYMBOL.fullmatch(symbol):
        raise ToolError(f"{symbol!r} is not a C identifier")
    base = Path(root).resolve()
    word = re.compile(rb"\b" + symbol.encode() + rb"\b")
    found: list[tuple[int, str]] = []  # (rank, text): real definitions before prototypes
    deadline = time.monotonic() + SEARCH_SECONDS
    note = ""
    for real, shown in _files(base, base, C_SUFFIXES):
        if time.monotonic() > deadline:
            note = f"(search stopped after {SEARCH_SECONDS:g} s: later files were not searched)"
            break
        try:
            data = _read_bytes(real, shown)
        except (ToolError, OSError):
            continue
        if not word.search(data):
            continue
        parsed = units.parse(data)
        for unit in parsed.units:
            if unit.name == symbol:
                found.append((0, f"{shown}:{unit.start_line + 1}-{unit.end_line + 1} ({unit.kind})\n{unit.text}"))
        for item in parsed.items:
            if symbol in item.names and item.kind not in ("signature", "include", "reference"):
                rank = 2 if item.kind == "prototype" else 1
                found.append((rank, f"{shown}:{item.start_line + 1}-{item.end_line + 1} ({item.kind})\n{item.text}"))
        if sum(1 for rank, _ in found if rank < 2) >= MAX_DEFINITIONS:
            break
    if not found:
        return f"no definition of {symbol} found in the workspace's C files {note}".rstrip()
    found.sort(key=lambda f: f[0])
    out = _Output()
    for _, text in found[:MAX_DEFINITIONS]:
        for line in [*text.split("\n"), ""]:
            if not out.add(line):
                break
    return out.text(note)


def grep(root: str | os.PathLike[str], pattern: str, path: str | None = None) -> str:
    """Lines matching a regular expression in a file or directory of the workspace (`path:line: text`).

    The search runs in a child process killed after GREP_SECONDS: Python's ``re`` can backtrack on one line
    for ever (``(a|aa)+$``) without releasing the GIL, and no pattern check catches every such shape. The
    child imports nothing from the workspace, which is usually the current directory (k3lsp.wire.isolated).
    """
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"pattern must be 1..{MAX_PATTERN_CHARS} characters")
    request = json.dumps({"root": str(root), "pattern": pattern, "path": path, "seconds": SEARCH_SECONDS})
    command = isolated.python_command("k3lsp.sandbox")
    try:
        child = subprocess.run(command, input=request, capture_output=True, text=True, timeout=GREP_SECONDS)
    except subprocess.TimeoutExpired:  # run() has killed it
        raise ToolError(
            f"the search for {pattern!r} took over {GREP_SECONDS:g} s and was stopped "
            "(catastrophic backtracking?); use a simpler pattern or a narrower path"
        ) from None
    if child.returncode != 0:
        raise ToolError(f"the search failed: {child.stderr.strip()[-500:]}")
    ok, text = json.loads(child.stdout)
    if not ok:
        raise ToolError(text)
    return text


def _grep(root: str | os.PathLike[str], pattern: str, path: str | None, seconds: float) -> str:
    """grep's search itself (in the child): an invalid regex is searched as a fixed string; the search
    stops after ``seconds`` (between lines) or at the size limits, and says so."""
    mode = "regex"
    try:
        regex = re.compile(pattern)
    except re.error as e:
        regex, mode = re.compile(re.escape(pattern)), f"fixed string (invalid regex: {e})"
    base = Path(root).resolve()
    if path is None or path in ("", "."):
        targets: Iterator[tuple[Path, str]] = _files(base, base, None)
    else:
        real = resolve(root, path)
        targets = _files(base, real, None) if real.is_dir() else iter([(real, real.relative_to(base).as_posix())])
    deadline = time.monotonic() + seconds
    out = _Output()
    matches = 0
    for real, shown in targets:
        try:
            text = _read_text(real, shown)
        except (ToolError, OSError):
            continue
        for n, line in enumerate(text.split("\n"), 1):
            if n % 1024 == 0 and time.monotonic() > deadline:
                break
            if regex.search(line[: MAX_LINE_CHARS * 4]):
                matches += 1
                if not out.add(f"{shown}:{n}: {line.strip()}"):
                    break
        if out.full or time.monotonic() > deadline:
            break
    note = f"(stopped after {seconds:g} s; narrow the path)" if time.monotonic() > deadline else ""
    header = f"{matches}{'+' if out.full else ''} matching lines for {pattern!r} ({mode})"
    return header + ("\n" + out.text(note) if out.lines or note else "")


# --- dispatch ---------------------------------------------------------------------------------------------


def _arg(args: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ToolError(f"argument {name!r} must be a {kind.__name__}")
    return value


TOOLS: dict[str, tuple[frozenset[str], Callable[[Path, dict[str, Any]], str]]] = {
    "read_lines": (
        frozenset({"path", "start", "end"}),
        lambda root, a: read_lines(root, _arg(a, "path", str), _arg(a, "start", int), _arg(a, "end", int)),
    ),
    "find_definition": (frozenset({"symbol"}), lambda root, a: find_definition(root, _arg(a, "symbol", str))),
    "grep": (
        frozenset({"pattern", "path"}),
        lambda root, a: grep(root, _arg(a, "pattern", str), _arg(a, "path", str, required=False)),
    ),
}


def run_tool(root: str | os.PathLike[str], name: str, args: Any) -> tuple[bool, str]:
    """Answer one tool request: (True, result) or (False, why it was refused). Never raises."""
    spec = TOOLS.get(name)
    if spec is None:
        return False, f"unknown tool {name!r}; available: {', '.join(sorted(TOOLS))}"
    if not isinstance(args, dict):
        return False, f"{name}: arguments must be an object"
    unknown = set(args) - spec[0]
    if unknown:
        return False, f"{name}: unknown arguments {sorted(map(str, unknown))}; expected {sorted(spec[0])}"
    try:
        return True, spec[1](Path(root), args)
    except ToolError as e:
        return False, f"{name}: {e}"
    except Exception as e:  # an unexpected failure is still just an answer the model reads
        log.exception("tool %s failed", name)
        return False, f"{name} failed: {e.__class__.__name__}: {e}"


def _grep_child() -> None:
    """The child process of `grep`: a JSON request on stdin, ``[ok, text]`` as JSON on stdout."""
    request = json.load(sys.stdin)
    try:
        answer = [True, _grep(request["root"], request["pattern"], request["path"], request["seconds"])]
    except ToolError as e:
        answer = [False, str(e)]
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    _grep_child()
