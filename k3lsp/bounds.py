"""How much one audited unit may report: findings per unit, bytes per finding, bytes per result.

The protocol bounds each field of a finding, not how many findings a unit gets: a model steered by the
code it reads (or a hostile daemon) once reported 20,000 findings for a 6-line unit, which took 3.6 GB in
the editor, an 886 MB cache row and an 838 MB JSON report. No real function has more than a handful of
distinct weaknesses, so both sides keep the first findings that fit these bounds and count the rest: the
daemon in the agent's finding stream, the editor again on what arrives (the daemon may not be ours).
What is dropped is counted in the ``done`` stats (``findings_over_limit``) and logged, never silent.
"""

from __future__ import annotations

import json

MAX_FINDINGS_PER_UNIT = 64
MAX_FINDING_BYTES = 64 * 1024  # one finding as JSON: a long message, a full trace and a fix fit
MAX_RESULT_BYTES = 512 * 1024  # every finding of one unit as JSON: what one cache row holds at most
MAX_STATS_BYTES = 16 * 1024  # the `done` stats kept with a result (a frame could carry 8 MiB of them)
MAX_STAT_WORD = 64  # a string stat kept from oversized stats (finish_reason and the like)
OVER_LIMIT = "findings_over_limit"  # the `done` stats field counting what the bounds dropped


def finding_bytes(finding: dict) -> int:
    """The size of a finding as the cache and the reports store it (ASCII JSON: one byte per character)."""
    return len(json.dumps(finding))


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
