"""How much one audited unit may report: findings per unit, bytes per finding, bytes per result.

The protocol bounds each field of a finding, not how many findings a unit gets: a model steered by the
code it reads (or a hostile daemon) once reported 20,000 findings for a 6-line unit, which took 3.6 GB in
the editor, an 886 MB cache row and an 838 MB JSON report. No real function has more than a handful of
distinct weaknesses, so both sides keep the first findings that fit these bounds and count the rest: the
daemon in the agent's finding stream, the editor again on what arrives (the daemon may not be ours).
What is dropped is counted in the ``done`` stats (``findings_over_limit``) and logged, never silent.

Where a finding may point is bounded too: every line it names (its range, its trace steps, its fix) must be a
line of its unit. ``fit_lines`` is that check for both sides; the daemon drops a finding naming any line
past the unit, the editor keeps the finding and drops only the stray trace steps or fix.
"""

from __future__ import annotations

import json

from k3lsp.wire.protocol import ProtocolError

MAX_FINDINGS_PER_UNIT = 64
MAX_FINDING_BYTES = 64 * 1024  # one finding as JSON: a long message, a full trace and a fix fit
MAX_RESULT_BYTES = 512 * 1024  # every finding of one unit as JSON: what one cache row holds at most
MAX_STATS_BYTES = 16 * 1024  # the `done` stats kept with a result (a frame could carry 8 MiB of them)
MAX_STAT_WORD = 64  # a string stat kept from oversized stats (finish_reason and the like)
OVER_LIMIT = "findings_over_limit"  # the `done` stats field counting what the bounds dropped


def finding_bytes(finding: dict) -> int:
    """The size of a finding as the cache and the reports store it (ASCII JSON: one byte per character)."""
    return len(json.dumps(finding))


def fit_lines(finding: dict, lines: int) -> tuple[dict, list[str]]:
    """A schema-checked finding map (``protocol.validate_finding``) held to the ``lines`` of its unit: the
    finding without its trace steps and fix that name a line past the unit, and what was cut, one sentence each.
    Raises ProtocolError when its own range is outside the unit (nothing of it can be shown). Start lines
    need no check: the schema keeps them >= 1 and <= their end lines."""
    if finding["end_line"] > lines:
        raise ProtocolError(f"lines {finding['start_line']}-{finding['end_line']} are outside the unit's {lines} lines")
    cut = [
        f"trace[{i}].line {step['line']} is outside the unit's {lines} lines"
        for i, step in enumerate(finding["trace"])
        if step["line"] > lines
    ]
    fitted = finding | {"trace": [step for step in finding["trace"] if step["line"] <= lines]}
    fix = finding.get("fix")
    if fix is not None and fix["end_line"] > lines:
        cut.append(f"fix.lines {fix['start_line']}-{fix['end_line']} are outside the unit's {lines} lines")
        del fitted["fix"]
    return fitted, cut


def bounded_stats(stats: dict) -> dict:
    """The ``done`` stats as they are kept with a result: whole when small; else only their numbers and short
    words (``finish_reason``), as many as fit MAX_STATS_BYTES."""
    if finding_bytes(stats) <= MAX_STATS_BYTES:
        return stats
    out: dict = {}
    size = 2
    for key, value in stats.items():
        short = isinstance(value, str) and len(value) <= MAX_STAT_WORD
        if len(key) > MAX_STAT_WORD or not (short or isinstance(value, int | float | bool)):
            continue
        size += finding_bytes({key: value})
        if size > MAX_STATS_BYTES:
            break
        out[key] = value
    return out


class FindingBounds:
    """Admits the findings of one unit while they fit the bounds; counts the ones it drops."""

    def __init__(self) -> None:
        self.kept = 0
        self.bytes = 0
        self.dropped = 0

    @property
    def full(self) -> bool:
        """No further finding can be admitted (they are only counted from now on)."""
        return self.kept >= MAX_FINDINGS_PER_UNIT

    def admit(self, finding: dict) -> str | None:
        """None if the finding is kept; else why it was dropped (and it is counted)."""
        size = finding_bytes(finding)
        if self.full:
            why = f"more than {MAX_FINDINGS_PER_UNIT} findings for one unit"
        elif size > MAX_FINDING_BYTES:
            why = f"a finding of {size} bytes (at most {MAX_FINDING_BYTES})"
        elif self.bytes + size > MAX_RESULT_BYTES:
            why = f"findings of more than {MAX_RESULT_BYTES} bytes for one unit"
        else:
            self.kept += 1
            self.bytes += size
            return None
        self.dropped += 1
        return why
