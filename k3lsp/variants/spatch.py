"""The model's rule run by spatch in the witnesses' sandbox: checked, then over files, bounded.

spatch runs exactly as a witness does (``k3lsp.witnesses.child``): a fresh private directory (0700) as its
working directory, ``HOME`` and ``TMPDIR`` (so no ``.cocciconfig`` of the user's or the repository's is read),
address space, CPU and wall time bounded, and under Landlock reading only the workspace and the system
(``k3lsp.witnesses.confine``: where it cannot be confined, it does not run). The rule has already passed
``k3lsp.variants.rule.check`` (no script, no include, no options); spatch is given ``--no-includes`` (it reads
no header, the workspace's included) and no ``--include-headers``, and the files to search by absolute path,
never ``--dir``.

Each file is a group of its own (``--file-groups``): spatch's ``--timeout`` covers the files of one group together,
so one file it cannot finish would lose the matches of every file searched with it.

A match is a line spatch marks: the rule's ``*`` (or ``-``) lines come out as the removed lines of a unified
diff against the file (spatch's context mode), read here hunk by hunk with their counts, so a source line that
looks like a diff header is never taken for one. Over a workspace the files go to spatch in chunks, so the
bounds hold between chunks: the number of files, the wall time of the whole search, the number of matches
(the search stops when it has them), each said in :attr:`Scan.stopped` when it cut the search short.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.witnesses import confine
from k3lsp.witnesses.analyze import UNCONFINED, find
from k3lsp.witnesses.child import Limits, run

RULE_FILE = "rule.cocci"
GROUPS_FILE = "files"  # one file per group: spatch's --timeout covers a group, so a slow file costs only itself
MAX_ERROR_CHARS = 800  # what of spatch's complaint goes back to the model
_NOISE = re.compile(r"^(init_defs_builtins:|Warning: PARSING:|warning: .*(unparsable|Can't find macro))")
_GAVE_UP = re.compile(r"^EXN: .*Timeout in (.+)$", re.MULTILINE)  # a group (one file) past spatch's --timeout
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@")


class SpatchUnavailable(RuntimeError):
    """spatch is not installed, or cannot be confined here: nothing is run."""


@dataclass(frozen=True)
class Bounds:
    """How far one search may go (the ``variants`` settings, docs/kernel.md)."""

    files: int = 2000  # C files searched; the rest are said to be left
    seconds: float = 120.0  # the whole search's wall time
    matches: int = 100  # matched lines kept; the search stops there
    per_file: int = 10  # spatch's own --timeout for one file
    chunk: int = 50  # files per spatch process: the bounds are checked between chunks


@dataclass(frozen=True)
class Match:
    """One line the rule marks: the file (absolute, as given) and its 1-based line."""

    path: Path
    line: int


@dataclass
class Scan:
    """What a search found and how far it went: ``searched`` of ``total`` files, and why it stopped short."""

    matches: list[Match] = field(default_factory=list)
    searched: int = 0
    total: int = 0
    stopped: str | None = None
    errors: list[str] = field(default_factory=list)  # spatch's failures on a chunk (the search goes on)

    def summary(self) -> dict:
        """How far the search went, as the reports say it (`k3lsp variants --json`, the editor's answer)."""
        return {"matches": len(self.matches), "searched": self.searched, "files": self.total,
                "stopped": self.stopped, "errors": self.errors}  # fmt: skip


def executable() -> str:
    """spatch's path; raises SpatchUnavailable when it is missing or cannot be confined here."""
    found = find("coccinelle")
    if found is None:
        raise SpatchUnavailable("spatch is not installed: apt-get install coccinelle")
    if confine.abi() < 1:
        raise SpatchUnavailable(f"spatch {UNCONFINED}")
    return found.executable


def complaint(stderr: str) -> str:
    """spatch's own words about a rule, without its start-up chatter, bounded."""
    lines = [line for line in stderr.splitlines() if line.strip() and not _NOISE.match(line)]
    text = "\n".join(lines).strip() or "spatch failed without saying why"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def parse_error(rule: str, root: Path, seconds: float = 20.0) -> str | None:
    """Why spatch cannot parse ``rule`` (``spatch --parse-cocci``, confined), or None when it can."""
    with tempfile.TemporaryDirectory(prefix="k3lsp-variants-") as tmp:
        (Path(tmp) / RULE_FILE).write_text(rule, encoding="utf-8")
        outcome = run([executable(), "--parse-cocci", RULE_FILE], tmp, Limits(seconds=seconds), [root])
    if outcome.timed_out:
        return f"spatch took over {seconds:g} s to parse the rule"
    return None if outcome.code == 0 else complaint(outcome.stderr)


def marked_lines(diff: str) -> dict[Path, list[int]]:
    """The old-file lines each ``---`` file's hunks remove: what the rule's ``*``/``-`` lines matched."""
    out: dict[Path, list[int]] = {}
    lines, i = diff.splitlines(), 0
    current: list[int] | None = None
    while i < len(lines):
        line, i = lines[i], i + 1
        if line.startswith("--- ") and i < len(lines) and lines[i].startswith("+++ "):
            current, i = out.setdefault(Path(line[4:].split("\t")[0]), []), i + 1
            continue
        hunk = _HUNK.match(line)
        if hunk is None or current is None:
            continue
        old = int(hunk[1])
        left_old, left_new = int(hunk[2] or 1), int(hunk[3] or 1)
        while (left_old > 0 or left_new > 0) and i < len(lines):
            body, i = lines[i], i + 1
            tag = body[:1]
            if tag == "-":
                current.append(old)
            if tag in ("-", " ", ""):
                old, left_old = old + 1, left_old - 1
            if tag in ("+", " ", ""):
                left_new -= 1
    return out


def search(rule: str, files: Sequence[Path], root: Path, bounds: Bounds = Bounds()) -> Scan:
    """The lines ``rule`` marks in ``files`` (absolute paths in the workspace ``root``), within ``bounds``."""
    exe, scan = executable(), Scan(total=len(files))
    taken = [p for p in files if "\n" not in str(p)][: bounds.files]  # a name is a line of the groups file
    if len(files) > bounds.files:
        scan.stopped = f"the file bound: {bounds.files:,} of {len(files):,} files searched"
    deadline = time.monotonic() + bounds.seconds
    with tempfile.TemporaryDirectory(prefix="k3lsp-variants-") as tmp:
        (Path(tmp) / RULE_FILE).write_text(rule, encoding="utf-8")
        argv = [exe, "--sp-file", RULE_FILE, "--no-includes", "--very-quiet", "--timeout", str(bounds.per_file)]
        argv += ["--temp-files", f"{tmp}/"]  # its small temporary files go to /tmp otherwise, which it cannot write
        for start in range(0, len(taken), bounds.chunk):
            left = deadline - time.monotonic()
            if left <= 0:
                scan.stopped = f"the time bound: {bounds.seconds:g} s, {scan.searched:,} of {len(files):,} files"
                break
            chunk = taken[start : start + bounds.chunk]
            (Path(tmp) / GROUPS_FILE).write_text("\n\n".join(map(str, chunk)) + "\n", encoding="utf-8")
            outcome = run([*argv, "--file-groups", GROUPS_FILE], tmp, Limits(seconds=left), [root])
            if outcome.timed_out:
                scan.stopped = f"the time bound: {bounds.seconds:g} s, {scan.searched:,} of {len(files):,} files"
                break
            scan.searched += len(chunk)
            if outcome.code != 0:
                scan.errors.append(complaint(outcome.stderr))
            scan.errors += [
                f"{m[1]}: spatch gave up after {bounds.per_file} s" for m in _GAVE_UP.finditer(outcome.stderr)
            ]
            wanted = {str(p) for p in chunk}
            for path, found in marked_lines(outcome.stdout).items():
                if str(path) in wanted:
                    scan.matches += [Match(path, n) for n in found]
            if len(scan.matches) >= bounds.matches:
                scan.matches = scan.matches[: bounds.matches]
                scan.stopped = f"the match bound: {bounds.matches:,} matches, {scan.searched:,} of {len(files):,} files"
                break
    return scan
