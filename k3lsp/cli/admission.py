"""Which files `k3lsp audit` takes, and what it tells the user about the others and about the cost, before any work.

A batch audit that answers "0 files" and exit status 0 for a path with no C file in it, or that sends a 5 MB
generated file as 49,207 units without a word, leaves the user to find out later (or never) why nothing, or far
too much, happened. So admission says what it skipped and why (a directory that admits no file, a binary file, a
set of files with no function in them), and warns, with the unit count and an estimate, before work a user would
not expect: a named file that a directory walk would have skipped as too large (generated code). The command
prints these before it contacts a daemon, so Ctrl-C costs nothing yet. Nothing to audit at all is an error (exit
status 2): the paths named are most likely wrong.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from k3lsp.core.options import Options, admitted_files
from k3lsp.units import split as units
from k3lsp.units.kernelc import DEFAULT_MACROS, Macros

# The estimate's figures: C under a large BPE vocabulary is about 3.5 characters a token, and the Mac pair
# prefills "a few hundred tokens/s" (docs/architecture.md, performance model). A rough figure, stated as one.
CHARS_PER_TOKEN = 3.5
PREFILL_TOKENS_PER_S = 300


@dataclass(frozen=True)
class Source:
    """A file to audit, read once: its units come from the same splitter as the editor's."""

    path: Path
    rel: str  # relative to the root: what the model and its tools see
    lines: list[str]
    units: tuple[units.Unit, ...]


@dataclass
class Admitted:
    """The files a batch audit takes, split into units, and what it says about the paths it was given: errors (a
    path missing or unreadable, nothing to audit: exit status 2) and warnings (skipped files, the cost)."""

    sources: list[Source] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def audit_root(paths: Sequence[Path]) -> Path:
    """The directory the model's tools are confined to: the deepest folder holding every input."""
    dirs = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths]
    return Path(os.path.commonpath(dirs))


def admit(
    paths: Sequence[Path], root: Path, options: Options, sent: Callable[[Source], Sequence[units.Unit]] | None = None
) -> Admitted:
    """Named files as given (any extension, any size: the user asked for them), directories walked with the
    include/exclude globs and maxFileBytes (the files over it counted in a warning); each file read and split, a
    binary one skipped. ``sent``: the units of a file the run will send (default all; ``--only-built``: the built
    ones), which are what a cost estimate counts."""
    out = Admitted()
    files: list[Path] = []
    empty: list[str] = []  # directories that admit no file
    for path in paths:
        if path.is_file():
            files.append(path.resolve())
        elif path.is_dir():
            wanted = list(admitted_files(path.resolve(), root, replace(options, max_file_bytes=sys.maxsize)))
            sized = [(p, p.stat().st_size) for p in wanted]
            found = [p for p, size in sized if size <= options.max_file_bytes]
            files += found
            large = [(p, size) for p, size in sized if size > options.max_file_bytes]
            if large:
                out.warnings.append(_too_large(path, large, options))
            if not found:
                empty.append(f"{path}: no file to audit in it ({walk_rule(options)})")
        else:
            out.errors.append(f"{path}: no such file or directory")
    out.sources, errors, warnings = read_sources(list(dict.fromkeys(files)), root, options.kernel_macros)
    out.errors += errors
    out.warnings += warnings
    named = {p.resolve() for p in paths if p.is_file()}
    for source in out.sources:
        if source.path in named and (size := source.path.stat().st_size) > options.max_file_bytes:
            out.warnings.append(_oversized(source, size, options, source.units if sent is None else sent(source)))
    _say_what_is_left(out, empty)
    return out


def shown(path: Path) -> str:
    """A path as the user named it: relative to the current directory when inside it."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def walk_rule(options: Options) -> str:
    """What a directory walk admits, in the settings' own terms."""
    return (
        f"none matches {', '.join(options.include)} outside {', '.join(options.exclude)} "
        f"within {options.max_file_bytes:,} bytes"
    )


def read_sources(
    files: Sequence[Path], root: Path, macros: Macros = DEFAULT_MACROS
) -> tuple[list[Source], list[str], list[str]]:
    """(sources, errors: files not read, warnings: files skipped as binary, or split coarser than into functions).
    Binary is a NUL byte, as git and the model's tools tell it from text."""
    sources, errors, warnings = [], [], []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            errors.append(f"{shown(path)}: {exc.strerror or exc}")
            continue
        nul = text.find("\0")
        if nul >= 0:
            warnings.append(
                f"{shown(path)}: binary (a NUL byte on line {text.count(chr(10), 0, nul) + 1}): not audited"
            )
            continue
        split = units.split(text, macros)
        note = units.fallback_note(split)
        if note is not None:
            warnings.append(f"{shown(path)}: {note}")
        sources.append(Source(path, path.relative_to(root).as_posix(), text.split("\n"), split))
    return sources, errors, warnings


def _oversized(source: Source, size: int, options: Options, sent: Sequence[units.Unit]) -> str:
    left = len(source.units) - len(sent)
    return (
        f"{shown(source.path)}: {size:,} bytes, over maxFileBytes ({options.max_file_bytes:,}) that a directory walk "
        f"admits (generated code?): audited because it is named, {cost(sent)}"
        + (f"; {left:,} more not built, skipped (--only-built)" if left else "")
    )


def _too_large(folder: Path, large: list[tuple[Path, int]], options: Options) -> str:
    """The files of a directory walk over maxFileBytes (Semgrep's cap: generated code, amalgamations), counted."""
    path, size = max(large, key=lambda found: found[1])
    return (
        f"{folder}: {_files(len(large))} over maxFileBytes ({options.max_file_bytes:,}) not audited, the largest "
        f"{shown(path)} ({size:,} bytes); name a file on the command line to audit it whatever its size"
    )


def _say_what_is_left(out: Admitted, empty: list[str]) -> None:
    """Directories that admitted nothing are warnings beside other files and errors when nothing is left; a run
    with files but no function says so."""
    if out.sources:
        out.warnings += empty
    elif empty:
        out.errors += empty
    elif not out.errors:
        out.errors.append("nothing to audit: every file given was skipped")
    if out.sources and not any(s.units for s in out.sources):
        out.warnings.append(f"no function to audit in the {_files(len(out.sources))}: nothing was sent")


def cost(audited: Sequence[units.Unit]) -> str:
    """``49,207 units, about 1,394,021 tokens of code: about 1.3 h of prefill at ~300 tokens/s (...)``."""
    return estimate(f"{len(audited):,} units", sum(len(u.text) for u in audited))


def estimate(counted: str, chars: float, measured: float | None = None, prompts: Prompts | None = None) -> str:
    """What ``chars`` characters of units cost in prefill: at ``measured`` tokens/s (a daemon's own prefill rate,
    the editor's workspace audit), else at the stated PREFILL_TOKENS_PER_S. A unit's prompt is more than its
    code (its file's context, the model's tool turns; the system prompt is cached): with ``prompts``, what the
    daemon measured one to cost, the time is the units' whole prompts, else the code alone, a floor."""
    code = chars / CHARS_PER_TOKEN
    rate = measured or PREFILL_TOKENS_PER_S
    said = f"{rate:,.0f} tokens/s, the daemon's measured rate" if measured else f"~{rate} tokens/s"
    if prompts is None:
        return (
            f"{counted}, about {code:,.0f} tokens of code: at least {_duration(code / rate)} of prefill at {said} "
            "(a unit's prompt adds its file's context and the tool turns; units in the result cache cost nothing)"
        )
    tokens = prompts.units * prompts.per_unit
    return (
        f"{counted}, about {code:,.0f} tokens of code, about {tokens:,.0f} tokens of prompt "
        f"({prompts.per_unit:,.0f} a unit, the mean of the {prompts.measured:,} audits the daemon has prefilled): "
        f"about {_duration(tokens / rate)} of prefill at {said} (units in the result cache cost nothing)"
    )


@dataclass(frozen=True)
class Prompts:
    """The units of an estimate and what one unit's prompt cost a daemon to prefill, over ``measured`` audits."""

    units: int
    per_unit: float
    measured: int


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} days"


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"
