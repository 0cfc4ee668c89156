"""Suppressions: inline `k3-audit: ignore` comments and the workspace baseline file.

Users of Semgrep, Snyk and Sonar ask first for two things (their issue trackers): silence one
finding in the source, next to the code, and accept the current findings of a whole tree without
touching it. The inline comment is `/* k3-audit: ignore CWE-120 */` (several CWEs: `CWE-120, CWE-787`;
no CWE: every finding) on the flagged line or the line above. Only a comment holds a directive
(``k3lsp.units.comments``): the same words in a string literal or in code are not one. The baseline is
`.k3audit-baseline.json` at the workspace root: finding fingerprints (findings.fingerprint, stable when
code above moves) with the CWE, title and path for the humans reviewing it, read as the repository's file
(``k3lsp.wire.supplied``). In ``k3lsp review`` a patch cannot silence its own finding (``k3lsp.findings.silencing``):
directives on the lines it adds are ``disarmed``, and only the entries the base's copy of the baseline holds
(``fingerprints``) apply.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3lsp.findings.spans import Edit, Position, Range, utf16_len
from k3lsp.units import comments
from k3lsp.wire import supplied

BASELINE_NAME = ".k3audit-baseline.json"
BASELINE_VERSION = 1
MAX_BASELINE_BYTES = 16 * 1024 * 1024  # ~100,000 entries; the file is the repository's, read with a cap

# `k3-audit: ignore` then optionally `CWE-1, CWE-2 ...`; in any comment style.
_DIRECTIVE = re.compile(r"k3-audit:\s*ignore\b(?P<cwes>(?:[\s,]*CWE-\d+)*)", re.IGNORECASE)
_CWE = re.compile(r"CWE-(\d+)", re.IGNORECASE)
_KEYWORD = re.compile(r"k3-audit", re.IGNORECASE)


# --- inline comments --------------------------------------------------------------------------------------


def _directive(lines: list[str], line: int) -> tuple[frozenset[int], int] | None:
    """The directive in a comment on 0-based ``line``: (the CWEs it ignores, empty for "all"; the column just past
    it), or None. Only lines that mention the directive are lexed, from the top of the file (a comment or a string
    may have begun lines earlier)."""
    if not 0 <= line < len(lines) or _DIRECTIVE.search(lines[line]) is None:
        return None
    for column, text in comments.on_lines(lines, line).get(line, []):
        m = _DIRECTIVE.search(text)
        if m is not None:
            return frozenset(int(n) for n in _CWE.findall(m.group("cwes"))), column + m.end()
    return None


def ignored_cwes(line: str) -> frozenset[int] | None:
    """The CWEs the directive in a comment of one line ignores: None without one, an empty set for "all"."""
    found = _directive([line], 0)
    return None if found is None else found[0]


def is_suppressed(lines: list[str], line: int, cwe: int) -> bool:
    """Whether a finding of `cwe` starting on 0-based file `line` is silenced by a directive on that
    line or on the line above."""
    for candidate in (line, line - 1):
        found = _directive(lines, candidate)
        if found is not None and (not found[0] or cwe in found[0]):
            return True
    return False


def disarmed(lines: list[str], which: Iterable[int]) -> list[str]:
    """The lines with every directive on the 0-based lines ``which`` made inert, each character kept in its place
    (comments and strings lex as before). In review, a directive on a line the patch adds or modifies silences
    nothing: a patch cannot silence its own finding."""
    out = list(lines)
    for n in which:
        if 0 <= n < len(out):
            out[n] = _KEYWORD.sub("k3_audit", out[n])
    return out


def suppression_edit(lines: list[str], line: int, cwe: int) -> Edit | None:
    """The edit that silences `cwe` on 0-based file `line`, or None if it is already silenced.

    A directive already on the line above gets the CWE appended (a second comment line would push the
    first one out of reach); otherwise a comment line is inserted above, indented like the code."""
    if is_suppressed(lines, line, cwe):
        return None
    above = line - 1
    found = _directive(lines, above)
    if found is not None:  # a directive with other CWEs: add ours to its list
        pos = Position(above, utf16_len(lines[above][: found[1]]))
        return Edit(Range(pos, pos), f", CWE-{cwe}")
    target = lines[line] if 0 <= line < len(lines) else ""
    indent = target[: len(target) - len(target.lstrip())]
    start = Position(line, 0)
    return Edit(Range(start, start), f"{indent}/* k3-audit: ignore CWE-{cwe} */\n")


# --- the baseline file ------------------------------------------------------------------------------------


class BaselineError(Exception):
    """The baseline file exists but cannot be read or written; the message says what to do."""


@dataclass
class Baseline:
    """The accepted findings of a workspace, by fingerprint.

    A broken file loads as an empty baseline with `error` set (so audits go on and the user is told
    once), and is never overwritten: `add` refuses until the user fixes or deletes it.
    """

    path: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> Baseline:
        path = Path(root) / BASELINE_NAME
        try:  # the repository's file: a regular file inside it, bounded (k3lsp.wire.supplied)
            raw = supplied.read(path, MAX_BASELINE_BYTES, root).decode("utf-8")
        except (FileNotFoundError, NotADirectoryError):  # no baseline, or no folder to hold one
            return cls(path)
        except OSError as e:
            return cls(path, error=f"cannot read {path}: {e.strerror or e}")
        except UnicodeDecodeError as e:
            return cls(path, error=f"cannot read {path}: it is not UTF-8 text ({e.reason} at byte {e.start})")
        try:
            return cls(path, _parse(raw))
        except (ValueError, TypeError, KeyError) as e:
            return cls(path, error=f"{path} is not a valid k3lsp baseline ({e}); fix or delete it")

    def __contains__(self, fingerprint: object) -> bool:
        return fingerprint in self.entries

    def restricted(self, fingerprints: frozenset[str]) -> Baseline:
        """The entries also in ``fingerprints``: a review keeps those the baseline held before the patch."""
        return Baseline(self.path, {k: v for k, v in self.entries.items() if k in fingerprints}, self.error)

    def add(self, fingerprint: str, cwe: int, title: str, path: str) -> bool:
        """Record a finding and write the file; False if it was already there."""
        if self.error is not None:
            raise BaselineError(self.error)
        if fingerprint in self.entries:
            return False
        self.entries[fingerprint] = {"fingerprint": fingerprint, "cwe": cwe, "title": title, "path": path}
        self.save()
        return True

    def save(self) -> None:
        """Write atomically, sorted, one entry per line: a file that diffs well in review."""
        body = {
            "version": BASELINE_VERSION,
            "findings": sorted(self.entries.values(), key=lambda e: (e["path"], e["cwe"], e["fingerprint"])),
        }
        text = json.dumps(body, indent=1, ensure_ascii=False) + "\n"
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".k3audit-", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.path)
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise BaselineError(f"cannot write {self.path}: {e}") from e


def fingerprints(data: bytes | None) -> frozenset[str]:
    """The fingerprints in a baseline file's bytes (a commit's copy of it); none when it is absent or broken."""
    if data is None:
        return frozenset()
    try:
        return frozenset(_parse(data.decode("utf-8")))
    except (ValueError, TypeError, KeyError):  # a UnicodeDecodeError is a ValueError
        return frozenset()


def _parse(raw: str) -> dict[str, dict[str, Any]]:
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION:
        raise ValueError(f'expected {{"version": {BASELINE_VERSION}, "findings": [...]}}')
    findings = data["findings"]
    if not isinstance(findings, list):
        raise TypeError('"findings" must be a list')
    entries: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(findings):
        if not isinstance(entry, dict) or not isinstance(entry.get("fingerprint"), str):
            raise ValueError(f"finding {i} has no fingerprint")
        entries[entry["fingerprint"]] = {
            "fingerprint": entry["fingerprint"],
            "cwe": entry.get("cwe"),
            "title": str(entry.get("title", "")),
            "path": str(entry.get("path", "")),
        }
    return entries
