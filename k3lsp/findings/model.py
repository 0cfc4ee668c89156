"""The Finding model: validated against its unit, fingerprinted, and written as a hover's text.

A finding comes from the model (a `report_finding` tool call), so nothing in it is trusted: the wire
shape is checked by `protocol.validate_finding`, then every line number is checked against the unit it
was reported for (`bounds.fit_lines`, the daemon's check too), and its text goes through `k3lsp.wire.sanitize`
(no control or bidi characters reach a diagnostic, hover, code-action title, terminal or report). A bad
finding is dropped with a log line and never shown; a bad trace step or fix (one past the unit, or a fix
hiding control or bidi characters in code) is dropped from an otherwise good finding. Line numbers are
1-based and relative to the unit (line 1 = `unit.start_line`), as in the prompt.

The fingerprint names a finding independently of where its function sits in the file, so baselines
and suppressions survive edits above it; SARIF output reuses it as `partialFingerprints`. Where a finding sits in
its file is ``k3lsp.findings.spans``; its LSP shapes (diagnostic, hover, edit) are the language server's, made at
its edge (``k3lsp.lsp.convert``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from k3lsp.units.split import Unit
from k3lsp.wire import bounds, protocol, sanitize

log = logging.getLogger(__name__)

SOURCE = "k3-audit"
SEVERITIES = protocol.SEVERITIES  # most severe first
CWE_URL = "https://cwe.mitre.org/data/definitions/{}.html"
MAX_MESSAGE_CHARS = 4000  # what a hover or a problems panel can usefully show
HOVER_REASONING_CHARS = 400  # the hover's "why this was flagged": the start of the model's reasoning


class FindingError(ValueError):
    """A finding that cannot be shown: malformed, or pointing outside its unit."""


@dataclass(frozen=True)
class TraceStep:
    line: int  # 1-based, relative to the unit
    note: str


@dataclass(frozen=True)
class Fix:
    start_line: int  # 1-based, relative to the unit, inclusive
    end_line: int
    replacement: str  # the new text of those whole lines, without a final newline


@dataclass(frozen=True)
class Verdict:
    """The model's verdict on a finding (its refutation turn, or its triage of an analyzer's alert)."""

    verdict: str  # confirmed | refuted | uncertain
    reason: str


@dataclass(frozen=True)
class Witness:
    """The analyzer alert a finding came from or was merged with."""

    tool: str
    rule: str
    line: int  # 1-based, relative to the unit


@dataclass(frozen=True)
class Finding:
    cwe: int
    severity: str
    title: str
    message: str
    start_line: int  # 1-based, relative to the unit, inclusive
    end_line: int
    confidence: float | None = None
    trace: tuple[TraceStep, ...] = ()
    fix: Fix | None = None
    reasoning: str = ""  # the model's reasoning before it reported the finding (its think channel), bounded
    verdict: Verdict | None = None
    witness: Witness | None = None

    @property
    def refuted(self) -> bool:
        return self.verdict is not None and self.verdict.verdict == "refuted"

    introduced: bool | None = None  # under review: whether the model says the change introduced it

    def to_dict(self) -> dict[str, Any]:
        """The wire shape (protocol.FINDING_SCHEMA): what the cache stores and `explain` sends."""
        out: dict[str, Any] = {
            "cwe": self.cwe,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "trace": [{"line": s.line, "note": s.note} for s in self.trace],
        }
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.fix is not None:
            out["fix"] = {
                "start_line": self.fix.start_line,
                "end_line": self.fix.end_line,
                "replacement": self.fix.replacement,
            }
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.verdict is not None:
            out["verdict"] = {"verdict": self.verdict.verdict, "reason": self.verdict.reason}
        if self.witness is not None:
            out["witness"] = {"tool": self.witness.tool, "rule": self.witness.rule, "line": self.witness.line}
        if self.introduced is not None:
            out["introduced"] = self.introduced
        return out


# --- validation -------------------------------------------------------------------------------------------


def validate(raw: Any, unit: Unit) -> Finding:
    """A finding from an untrusted map, checked against the unit it was reported for."""
    try:
        d, cut = bounds.fit_lines(protocol.validate_finding(raw), unit.line_count)
    except protocol.ProtocolError as e:
        raise FindingError(str(e)) from None
    for why in cut:
        log.info("dropped from a finding for %s: %s", unit.name, why)
    title = sanitize.line(d["title"])
    if not title:
        raise FindingError("title is blank")
    trace = tuple(TraceStep(step["line"], sanitize.line(step["note"])) for step in d["trace"])
    fix = None
    if "fix" in d:
        f = d["fix"]
        if sanitize.unsafe_code(f["replacement"]):
            log.warning("dropped fix for %s: control or bidi characters in its code", unit.name)
        else:
            fix = Fix(f["start_line"], f["end_line"], f["replacement"].removesuffix("\n"))
    message = sanitize.text(d["message"]).strip()
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return Finding(
        cwe=d["cwe"],
        severity=d["severity"],
        title=title,
        message=message,
        start_line=d["start_line"],
        end_line=d["end_line"],
        confidence=d.get("confidence"),
        trace=trace,
        fix=fix,
        reasoning=sanitize.text(d.get("reasoning", "")).strip(),
        verdict=Verdict(d["verdict"]["verdict"], sanitize.text(d["verdict"]["reason"]).strip())
        if "verdict" in d
        else None,
        witness=_witness(d.get("witness"), unit),
        introduced=d.get("introduced"),
    )


def _witness(raw: dict | None, unit: Unit) -> Witness | None:
    if raw is None or raw["line"] > unit.line_count:
        return None
    return Witness(sanitize.line(raw["tool"]), sanitize.line(raw["rule"]), raw["line"])


def accept(raws: Iterable[Any], unit: Unit) -> list[Finding]:
    """The valid findings among those reported for a unit; each bad one is logged and dropped."""
    out = []
    for raw in raws:
        try:
            out.append(validate(raw, unit))
        except FindingError as e:
            log.warning("dropped a finding for %s (line %d): %s", unit.name, unit.start_line + 1, e)
    return out


def severity_rank(severity: str) -> int:
    """0 for critical .. 4 for info; raises ValueError for an unknown severity (a bad setting)."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise ValueError(f"unknown severity {severity!r}; expected one of {', '.join(SEVERITIES)}") from None


def at_least(findings: Iterable[Finding], min_severity: str) -> list[Finding]:
    """The findings at or above a severity (the `minSeverity` setting)."""
    limit = severity_rank(min_severity)
    return [f for f in findings if SEVERITIES.index(f.severity) <= limit]


def fingerprint(finding: Finding, unit: Unit) -> str:
    """A stable name for a finding: CWE, function, flagged code and title, never line numbers or paths."""
    flagged = unit.text.split("\n")[finding.start_line - 1 : finding.end_line]
    h = hashlib.sha256(b"k3lsp-finding-v1\0")
    for part in (str(finding.cwe), unit.name, " ".join(" ".join(flagged).split()), finding.title.lower()):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:32]


# --- the hover's text -------------------------------------------------------------------------------------


def cwe_url(cwe: int) -> str:
    return CWE_URL.format(cwe)


@dataclass(frozen=True)
class HoverStyle:
    """How a client wants its hover: Markdown or plain text (its ``contentFormat``), and whether it already shows
    the diagnostic under the pointer (VS Code does: title, message and trace would then appear twice)."""

    markdown: bool = True
    shows_diagnostic: bool = False


def hover_text(finding: Finding, unit: Unit, style: HoverStyle = HoverStyle(), unbuilt: str = "") -> str:
    """The one place a hover is written: title, CWE, severity, confidence, message, why, trace and fix; and,
    ``unbuilt``, why the kernel configuration does not build the unit (the Makefile rule or the ``#if``: the
    tree's text, escaped as the model's is).

    Model text is data, not markup: every punctuation character escaped in Markdown (``sanitize.markdown``: no
    link, image, HTML or URI can form), verbatim in plain text (sanitised already, see ``validate``). A client that
    shows the diagnostic itself gets only what the diagnostic lacks (the facts line, the reasoning and the fix).
    """
    md = style.markdown
    esc = sanitize.markdown if md else str
    cwe = f"[CWE-{finding.cwe}]({cwe_url(finding.cwe)})" if md else f"CWE-{finding.cwe} ({cwe_url(finding.cwe)})"
    facts = [cwe, f"severity **{finding.severity}**" if md else f"severity {finding.severity}"]
    if finding.confidence is not None:
        facts.append(f"confidence {finding.confidence:.0%}")
    facts.append(f"`{SOURCE}`" if md else SOURCE)
    parts = [" · ".join(facts)]
    if unbuilt:
        parts.append(f"**Not built in this configuration:** {esc(unbuilt)}" if md else f"Not built: {unbuilt}")
    if not style.shows_diagnostic:
        parts.insert(0, f"**{esc(finding.title)}**" if md else finding.title)
        if finding.message:
            parts.append(esc(finding.message))
    if finding.witness is not None:
        said = f"{finding.witness.tool} {finding.witness.rule}"
        parts.append(f"**Analyzer:** {esc(said)}" if md else f"Analyzer: {said}")
    if finding.verdict is not None:
        word = f"{finding.verdict.verdict.capitalize()} by the model"
        parts.append(f"**{word}:** {esc(finding.verdict.reason)}" if md else f"{word}: {finding.verdict.reason}")
    if finding.reasoning:
        why = short_reasoning(finding.reasoning)
        parts.append(f"**Why this was flagged:** {esc(why)}" if md else f"Why this was flagged: {why}")
    if not style.shows_diagnostic and finding.trace:
        steps = "\n".join(
            f"{i}. line {unit.file_line(s.line) + 1}: {esc(s.note)}" for i, s in enumerate(finding.trace, 1)
        )
        parts.append(("**Trace**\n\n" if md else "Trace\n") + steps)
    if finding.fix is not None:
        fix = finding.fix
        first, last = unit.file_line(fix.start_line) + 1, unit.file_line(fix.end_line) + 1
        where = f"line {first}" if first == last else f"lines {first}-{last}"
        if md:
            fence = "`" * max(3, _longest_backtick_run(fix.replacement) + 1)
            parts.append(f"**Suggested fix** ({where})\n\n{fence}c\n{fix.replacement}\n{fence}")
        else:
            parts.append(f"Suggested fix ({where}):\n{fix.replacement}")
    return "\n\n".join(parts)


def short_reasoning(text: str, limit: int = HOVER_REASONING_CHARS) -> str:
    """The reasoning on one line, cut at a word near ``limit`` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def _longest_backtick_run(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)
