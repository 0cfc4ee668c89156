"""The finding a variant search starts from: one of a report's findings (``k3lsp audit``'s JSON or SARIF, by its
number), or a file and line the user points at.

A report names its files relative to the root it was audited from (JSON ``root`` + ``uri``; SARIF ``SRCROOT`` +
the location's ``uri``), and that root is the workspace the variants are searched in. Whatever the report says is
read as untrusted: a location that leaves the root, a finding number past the end, a field of the wrong type are
each one sentence naming the value, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from k3lsp.units.split import Unit
from k3lsp.wire import supplied
from k3lsp.wire.protocol import SEVERITIES

MAX_REPORT_BYTES = 256 * 1024**2
PLACE_CWE = 710  # a line the user points at names no weakness: "Improper Adherence to Coding Standards"
SARIF_FINGERPRINT = "k3AuditFingerprint/v1"  # k3lsp.cli.sarif.FINGERPRINT_KEY


class OriginError(ValueError):
    """The finding to start from cannot be had; the message says which value is wrong and what to give."""


@dataclass(frozen=True)
class Origin:
    """One finding in file coordinates (1-based lines), in the workspace ``root`` it is searched for."""

    root: Path
    path: Path  # absolute, inside root
    line: int
    end_line: int
    cwe: int
    severity: str
    title: str
    message: str
    fingerprint: str  # names the saved rule and links each variant to it (``variant_of``)

    @property
    def rel(self) -> str:
        return self.path.relative_to(self.root).as_posix()

    def wire(self, unit: Unit) -> dict[str, Any]:
        """The finding as the daemon reads one (protocol.FINDING_SCHEMA), its lines relative to ``unit``."""
        first = max(1, self.line - unit.start_line)
        last = min(unit.line_count, max(first, self.end_line - unit.start_line))
        note = {"line": first, "note": self.message[:2000] or self.title}
        return {
            "cwe": self.cwe,
            "severity": self.severity,
            "title": self.title,
            "message": self.message or self.title,
            "start_line": first,
            "end_line": last,
            "trace": [note],
        }


def _inside(root: Path, rel: str, where: str) -> Path:
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise OriginError(f"{where}: {rel!r} is outside the report's root {root}")
    if not path.is_file():
        raise OriginError(f"{where}: {path} is not a file (was the report made in another tree?)")
    return path


def _load(report: Path) -> Any:
    try:
        return json.loads(supplied.read(report, MAX_REPORT_BYTES))
    except OSError as exc:
        raise OriginError(f"{report}: cannot read the report: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise OriginError(f"{report}: not a JSON or SARIF report of k3lsp audit: {exc}") from exc


def _pick(items: Any, number: int, report: Path) -> Any:
    if not isinstance(items, list) or not items:
        raise OriginError(f"{report}: the report has no findings")
    if not 1 <= number <= len(items):
        raise OriginError(f"--finding {number}: the report has findings 1 to {len(items)}")
    return items[number - 1]


def from_report(report: Path, number: int) -> Origin:
    """Finding ``number`` (1-based, in the report's order) of a ``k3lsp audit`` JSON or SARIF report."""
    data = _load(report)
    try:
        if isinstance(data, dict) and "runs" in data:
            return _from_sarif(data, number, report)
        if isinstance(data, dict) and "findings" in data:
            return _from_json(data, number, report)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        if isinstance(exc, OriginError):
            raise
        raise OriginError(f"{report}: finding {number} is not as k3lsp audit writes one ({exc!r} is missing)") from exc
    raise OriginError(f"{report}: neither a JSON report (findings) nor SARIF (runs) of k3lsp audit")


def _severity(value: Any) -> str:
    return value if value in SEVERITIES else "medium"


def _from_json(data: dict, number: int, report: Path) -> Origin:
    f, root = _pick(data["findings"], number, report), Path(str(data["root"])).resolve()
    path = _inside(root, str(f["uri"]), f"{report}: finding {number}")
    return Origin(
        root, path, int(f["line"]), int(f["end_line"]), int(f["cwe"]), _severity(f.get("severity")),
        str(f["title"]), str(f.get("message") or ""), str(f["fingerprint"]),
    )  # fmt: skip


def _from_sarif(data: dict, number: int, report: Path) -> Origin:
    results = [(run, r) for run in data["runs"] for r in run.get("results", [])]
    run, result = _pick(results, number, report)
    base = urlparse(run["originalUriBaseIds"]["SRCROOT"]["uri"])
    root = Path(unquote(base.path)).resolve()
    physical = result["locations"][0]["physicalLocation"]
    path = _inside(root, unquote(physical["artifactLocation"]["uri"]), f"{report}: result {number}")
    region = physical["region"]
    title, _, message = str(result["message"]["text"]).partition("\n")
    cwe = str(result["ruleId"]).removeprefix("CWE-")
    return Origin(
        root, path, int(region["startLine"]), int(region.get("endLine", region["startLine"])),
        int(cwe) if cwe.isdigit() else PLACE_CWE, _severity(result.get("properties", {}).get("severity")),
        title, message, str(result.get("partialFingerprints", {}).get(SARIF_FINGERPRINT) or _digest(path, title)),
    )  # fmt: skip


def _digest(path: Path, *parts: object) -> str:
    h = hashlib.sha256(b"k3lsp-variant-origin-v1\0")
    for part in (str(path), *map(str, parts)):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()[:32]


def from_place(place: str, root: Path, title: str = "") -> Origin:
    """``FILE:LINE`` in the workspace ``root``: the line the user points at, ``title`` what is wrong there."""
    name, _, number = place.rpartition(":")
    if not name or not number.isdigit() or int(number) < 1:
        raise OriginError(f"{place!r} is not FILE:LINE (a file and a line number from 1), e.g. drivers/x.c:42")
    root = root.resolve()
    path = Path(name).resolve()
    if not path.is_relative_to(root):
        raise OriginError(f"{name}: outside the workspace {root}; give --root, a folder that holds it")
    if not path.is_file():
        raise OriginError(f"{name}: no such file")
    line = int(number)
    lines = path.read_text(encoding="utf-8", errors="surrogateescape").count("\n") + 1
    if line > lines:
        raise OriginError(f"{place}: the file has {lines} lines")
    title = title or f"the bug at {path.relative_to(root).as_posix()}:{line}"
    return Origin(root, path, line, line, PLACE_CWE, "medium", title, title, _digest(path, line, title))
