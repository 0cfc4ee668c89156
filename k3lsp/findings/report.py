"""A finding as a report shows it (``k3lsp audit``, ``k3lsp review``, SARIF, e-mail, the agents' results): in
file coordinates, as compilers and SARIF count them, with how it is silenced and the model's verdict. The editor
shows the same findings as LSP diagnostics (``k3lsp.lsp.convert``); every other front end shows these rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3lsp.findings.spans import Range


@dataclass(frozen=True)
class Span:
    """A file region as compilers and SARIF count it: 1-based lines and UTF-16 columns, end column exclusive.
    The same numbers as the editor's diagnostic range, plus one."""

    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def of(cls, rng: Range) -> Span:
        return cls(rng.start.line + 1, rng.start.character + 1, rng.end.line + 1, rng.end.character + 1)


@dataclass(frozen=True)
class Step:
    """One step of a finding's data-flow trace, in file coordinates."""

    span: Span
    note: str


@dataclass(frozen=True)
class Edit:
    """A suggested fix: replace the whole lines of ``span`` by ``replacement``."""

    span: Span
    replacement: str


@dataclass(frozen=True)
class Reported:
    """One finding as the batch tool reports it, in file coordinates."""

    path: str  # as the user named it: relative to the current directory when inside it
    uri: str  # relative to the report's root, `/` separated (SARIF's artifactLocation)
    line: int
    column: int
    end_line: int
    end_column: int
    severity: str
    cwe: int
    title: str
    message: str
    unit: str
    fingerprint: str
    confidence: float | None = None
    trace: tuple[Step, ...] = ()
    fix: Edit | None = None
    reasoning: str = ""  # why the model flagged it (its reasoning before the report)
    suppression: str | None = None  # silenced: pipeline.IN_SOURCE (a comment), EXTERNAL (the baseline), REFUTED
    verdict: str | None = None  # the model's verdict on it (k3lsp.core.verdicts), and why
    verdict_reason: str = ""
    kconfig_state: str | None = None  # its unit's under the kconfig setting (built-in, module, not built, unknown)
    kconfig_reason: str = ""  # why not built, or unknown: the Makefile rule or the #if (docs/kernel.md)
