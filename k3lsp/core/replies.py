"""The daemon's replies that the editor side reads field by field, decoded once where they arrive.

The protocol keeps ``welcome.limits``, ``welcome.loading`` and ``done.stats`` as free maps (a newer daemon may
add keys), and the protocol validation only proves their shape. Everything the editor side decides from them
(whose results these are, how much a prompt may hold, whether the model is still loading, whether an audit
is complete, how many tokens it cost) is read here, defensively, into typed values: the rest of the code
never reads those maps by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3lsp.wire.address import cut_short
from k3lsp.wire.bounds import OVER_LIMIT, bounded_stats

LOADING = "loading"  # the `state` of a welcome or status while the daemon reads its model


def count(value: object) -> int:
    """A count from the daemon's free-form maps: anything but a non-negative int counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _seconds(value: object) -> bool:
    """Whether a free-form field is a positive, finite number of seconds."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e9


@dataclass(frozen=True)
class LoadProgress:
    """How far a loading daemon is: ``percent`` (0..100, when it says) and an estimate of the time left."""

    percent: int | None = None
    eta_seconds: float | None = None

    @classmethod
    def of(cls, loading: Any) -> LoadProgress:
        """From a ``loading`` map as received (anything else: no figures)."""
        if not isinstance(loading, dict):
            return cls()
        pct, eta = loading.get("percent"), loading.get("eta_seconds")
        if isinstance(pct, bool) or not isinstance(pct, int | float):
            pct = None
        if isinstance(eta, bool) or not isinstance(eta, int | float) or not 0 <= eta < 1e7:
            eta = None
        return cls(None if pct is None else max(0, min(100, int(pct))), eta)

    def describe(self) -> str:
        """``backend loading (42 %, about 80 s left)``; without figures just ``backend loading``: the words the
        status views, ``k3lsp status`` and the progress notes all show."""
        parts = [f"{self.percent} %"] if self.percent is not None else []
        if self.eta_seconds is not None:
            parts.append(f"about {self.eta_seconds:.0f} s left")
        return f"backend loading ({', '.join(parts)})" if parts else "backend loading"


def loading_of(reply: Any) -> LoadProgress | None:
    """The load progress a ``welcome`` or ``status`` map reports; None when the daemon is not loading."""
    if isinstance(reply, dict) and reply.get("state") == LOADING:
        return LoadProgress.of(reply.get("loading"))
    return None


@dataclass(frozen=True)
class Welcome:
    """A daemon's ``welcome``: what it serves, and the limits the editor side respects."""

    model: str
    experts: int
    ranks: int
    fingerprint: str  # the served checkpoint; "" when the daemon names none (its results are never cached)
    prompt_version: str
    max_prompt_tokens: int | None  # a unit refused as too long is remembered under this limit
    loading: LoadProgress | None  # set while the daemon reads its model
    raw: dict = field(compare=False, repr=False)  # as received (already protocol-valid), for status displays
    random_weights: bool = False  # the checkpoint says its weights are random: whatever it finds is noise
    deadline: float | None = None  # seconds the daemon gives one request at most: how long a busy one stays busy

    @classmethod
    def of(cls, reply: dict) -> Welcome:
        limits = reply.get("limits") if isinstance(reply.get("limits"), dict) else {}
        most = limits.get("max_prompt_tokens")
        deadline = limits.get("deadline")
        return cls(
            model=str(reply.get("model", "")),
            experts=count(reply.get("experts")),
            ranks=count(reply.get("ranks")) or 1,
            fingerprint=str(reply.get("fingerprint") or ""),
            prompt_version=str(limits.get("prompt_version", "")),
            max_prompt_tokens=most if count(most) else None,
            loading=loading_of(reply),
            raw=reply,
            random_weights=reply.get("random_weights") is True,
            deadline=float(deadline) if _seconds(deadline) else None,
        )

    def serving(self) -> str:
        """One line for the status views: ``Kimi-K3-Audit-451E (451 experts, 2 ranks)``."""
        return f"{self.model} ({self.experts} experts, {self.ranks} ranks)"


@dataclass(frozen=True)
class DoneStats:
    """A finished audit's ``done`` stats: what the editor decides from them, and the map kept with its result."""

    cut_short: str | None  # why the daemon stopped it before the model ended it; None for a complete audit
    prompt_tokens: int
    generated_tokens: int
    cached_tokens: int
    from_store: bool  # the daemon answered from its result store: nothing was generated
    over_limit: int  # findings dropped beyond k3lsp.wire.bounds, by the daemon and by this side together
    raw: dict = field(compare=False, repr=False)  # bounded (k3lsp.wire.bounds), kept in the cache with the result

    @classmethod
    def of(cls, stats: Any, dropped_here: int = 0) -> DoneStats:
        raw = bounded_stats(stats if isinstance(stats, dict) else {})
        if dropped_here:
            raw = raw | {OVER_LIMIT: count(raw.get(OVER_LIMIT)) + dropped_here}
        return cls(
            cut_short=cut_short(raw),
            prompt_tokens=count(raw.get("prompt_tokens")),
            generated_tokens=count(raw.get("generated_tokens")),
            cached_tokens=count(raw.get("cached_tokens")),
            from_store=raw.get("from_store") is True,
            over_limit=count(raw.get(OVER_LIMIT)),
            raw=raw,
        )

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.generated_tokens
