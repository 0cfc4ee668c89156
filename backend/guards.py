"""Guards on generation: a repetition detector, and the finish accounting behind `status`.

The audit model's loop rate and stop-token reliability were never evaluated (its card has no figure), so every
generation is watched for degenerate repetition and every finish reason is counted: `status` reports
the running loop rate and the share of generations that ended on a stop token.
"""

from collections import Counter
from dataclasses import dataclass, field

FINISH_REASONS = ("stop", "length", "loop", "cancelled", "error")


@dataclass
class LoopDetector:
    """Flags a generation whose last `span` tokens repeat one block of at most `max_period` tokens.

    For every period p it keeps the length of the current run of tokens equal to the token p
    positions back; a run of `span - p` means the last `span` tokens are p-periodic. That is
    O(max_period) per token and no allocation, cheap next to a decode step. Periods above
    `max_period` and spans below `span` pass: code legitimately repeats short patterns.
    """

    span: int = 64
    max_period: int = 16
    _tokens: list[int] = field(default_factory=list)
    _runs: list[int] = field(default_factory=list)

    def __post_init__(self):
        if not 1 <= self.max_period < self.span:
            raise ValueError(f"need 1 <= max_period < span, got max_period={self.max_period} span={self.span}")
        self._runs = [0] * (self.max_period + 1)

    def add(self, token: int) -> bool:
        """Record one generated token; True when the tail has become a loop."""
        tokens = self._tokens
        tokens.append(token)
        n = len(tokens)
        looping = False
        for p in range(1, min(self.max_period, n - 1) + 1):
            self._runs[p] = self._runs[p] + 1 if tokens[n - 1 - p] == token else 0
            looping = looping or self._runs[p] + p >= self.span
        if n > self.span + self.max_period:
            # Only the last max_period tokens are ever looked back at.
            del tokens[: n - self.max_period - 1]
        return looping

    @property
    def period(self) -> int | None:
        """The shortest period that currently covers the last `span` tokens, if any."""
        return next((p for p in range(1, self.max_period + 1) if self._runs[p] + p >= self.span), None)


@dataclass
class FinishCounter:
    """Counts of finish reasons over an engine's life; the loop rate and the stop-token share."""

    counts: Counter = field(default_factory=Counter)

    def add(self, reason: str) -> None:
        if reason not in FINISH_REASONS:
            raise ValueError(f"unknown finish reason {reason!r}")
        self.counts[reason] += 1

    @property
    def generations(self) -> int:
        return sum(self.counts.values())

    def share(self, reason: str) -> float:
        """Fraction of generations that ended with `reason` (0.0 before the first one)."""
        return self.counts[reason] / self.generations if self.generations else 0.0

    def summary(self) -> dict:
        return {
            "generations": self.generations,
            "finish": {r: self.counts[r] for r in FINISH_REASONS},
            "loop_rate": self.share("loop"),
            "stop_share": self.share("stop"),
        }
