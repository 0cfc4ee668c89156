"""What the audits of a run cost: tokens prefilled and generated, the daemon's seconds and the model's tool calls.

The figures come from each unit's ``done`` stats (docs/protocol.md), which the cache keeps with the result: a
resumed run still counts what its earlier part cost. ``prefilled`` is what the daemon had to read (the prompt
less the part its prompt cache already held); ``seconds`` is the daemon's own time for the unit, from admission to
``done``, so units that ran side by side in one batch each count their whole time (the run's wall time is in the
report beside it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields

from k3lsp.core.replies import count
from k3lsp.core.run import UnitResult


@dataclass(frozen=True)
class Cost:
    units: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    tool_calls: int = 0
    incomplete: int = 0  # cut short by the daemon (length, budget, loop, deadline): findings may be missing
    refused: int = 0  # too long to audit: no findings at all

    @classmethod
    def of(cls, results: Iterable[UnitResult]) -> Cost:
        out = cls()
        for r in results:
            seconds = r.stats.raw.get("seconds")
            out += cls(
                units=1,
                prompt_tokens=r.stats.prompt_tokens,
                cached_tokens=r.stats.cached_tokens,
                generated_tokens=r.stats.generated_tokens,
                seconds=float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else 0.0,
                tool_calls=count(r.stats.raw.get("tool_calls")),
                incomplete=int(r.cut_short is not None),
                refused=int(r.refusal is not None),
            )
        return out

    def __add__(self, other: Cost) -> Cost:
        return Cost(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def prefilled_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens)

    def per_unit(self) -> dict[str, float]:
        """Means per audited unit: what one function costs."""
        n = self.units or 1
        return {
            "prefilled_tokens": self.prefilled_tokens / n,
            "generated_tokens": self.generated_tokens / n,
            "seconds": self.seconds / n,
            "tool_calls": self.tool_calls / n,
        }

    def to_json(self) -> dict:
        return asdict(self) | {"prefilled_tokens": self.prefilled_tokens, "per_unit": self.per_unit()}
