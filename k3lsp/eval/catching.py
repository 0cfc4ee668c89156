"""Whether a review caught its bug, and what the catches add up to.

The catch rule: the introducing commit I is *caught* when one of its review's introduced findings, at or above
the minimum severity, touches a bug line: same file, and the bug line within ``window`` lines of the finding's
lines (``start - window <= bug <= end + window``). Only whole reviews are judged (``CommitReview.problems``
empty): a review that could not audit every unit it should have is listed apart, neither caught nor missed.

The catch rate is caught / judged with a 95 % Wilson score interval (Wilson 1927; the interval that stays inside
0..1 and behaves at small n and at rates near 0 or 1, where the normal approximation does not). Noise is the
number of introduced findings per judged commit, and of those, the ones that touch no bug line. A case's
directory (its subsystem) is the directory, ``depth`` components deep, of the file holding most of its bug lines.
"""

from __future__ import annotations

import math
import posixpath
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from k3lsp.eval.bugs import Bug, BugLine
from k3lsp.eval.review import CommitReview, Introduced
from k3lsp.findings.model import SEVERITIES, severity_rank

Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile
DEFAULT_WINDOW = 3
DEFAULT_DEPTH = 2  # drivers/net, fs/ext4, net/ipv4, kernel/bpf


def touches(finding: Introduced, bug: BugLine, window: int) -> bool:
    return finding.path == bug.path and finding.start_line - window <= bug.line <= finding.end_line + window


@dataclass(frozen=True)
class Judged:
    """One case's review and what it came to."""

    bug: Bug
    review: CommitReview
    considered: tuple[Introduced, ...]  # the introduced findings at or above the minimum severity
    catching: tuple[Introduced, ...]  # ... of which touch a bug line

    @property
    def whole(self) -> bool:
        return not self.review.problems

    @property
    def caught(self) -> bool:
        return bool(self.catching)


def judge(bug: Bug, review: CommitReview, window: int, min_severity: str) -> Judged:
    limit = severity_rank(min_severity)
    considered = tuple(f for f in review.introduced if f.severity in SEVERITIES and severity_rank(f.severity) <= limit)
    catching = tuple(f for f in considered if any(touches(f, b, window) for b in bug.lines))
    return Judged(bug, review, considered, catching)


def wilson(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    caught: int
    judged: int

    @property
    def value(self) -> float:
        return self.caught / self.judged if self.judged else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.caught, self.judged)


@dataclass(frozen=True)
class Tally:
    """A run's cases, counted."""

    rate: Rate
    incomplete: int  # reviews with problems: not judged
    findings: int  # introduced findings (at or above the minimum severity) over the judged reviews
    away: int  # ... of which touch no bug line

    @property
    def findings_per_commit(self) -> float:
        return self.findings / self.rate.judged if self.rate.judged else 0.0

    @property
    def away_per_commit(self) -> float:
        return self.away / self.rate.judged if self.rate.judged else 0.0


def tally(judged: Iterable[Judged]) -> Tally:
    cases = list(judged)
    whole = [j for j in cases if j.whole]
    findings = sum(len(j.considered) for j in whole)
    return Tally(
        Rate(sum(j.caught for j in whole), len(whole)),
        incomplete=len(cases) - len(whole),
        findings=findings,
        away=findings - sum(len(j.catching) for j in whole),
    )


def directory(bug: Bug, depth: int = DEFAULT_DEPTH) -> str:
    """The case's subsystem: the leading ``depth`` directories of the file with most of its bug lines (``.`` for
    the top level; ties go to the first file by name)."""
    counts = Counter(b.path for b in bug.lines)
    top = max(sorted(counts), key=lambda p: counts[p])
    parts = posixpath.dirname(top).split("/")
    return "/".join(parts[:depth]) or "."


def by_directory(judged: Sequence[Judged], depth: int = DEFAULT_DEPTH) -> dict[str, Rate]:
    """The catch rate per subsystem, most judged cases first."""
    groups: dict[str, list[Judged]] = {}
    for j in judged:
        if j.whole:
            groups.setdefault(directory(j.bug, depth), []).append(j)
    rates = {d: Rate(sum(j.caught for j in js), len(js)) for d, js in groups.items()}
    return dict(sorted(rates.items(), key=lambda item: (-item[1].judged, item[0])))
