"""A daemon that is still loading its model, as the editors and `k3lsp status` show it.

The daemon answers ``hello`` and ``status`` while it reads its weights (minutes on the Mac pair): its
``welcome`` and ``status`` then carry ``state: loading`` and a ``loading`` map (docs/protocol.md). These
helpers read that map defensively (it comes from the daemon) and word it the same way everywhere:
"backend loading (42 %, about 80 s left)".
"""

from __future__ import annotations

from typing import Any

LOADING = "loading"


def is_loading(reply: Any) -> bool:
    """Whether a ``welcome`` or a ``status`` map says the daemon is still loading its model."""
    return isinstance(reply, dict) and reply.get("state") == LOADING


def percent(loading: Any) -> int | None:
    """The ``percent`` of a ``loading`` map, clamped to 0..100; None when missing or not a number."""
    value = loading.get("percent") if isinstance(loading, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(0, min(100, int(value)))


def describe(loading: Any) -> str:
    """``backend loading (42 %, about 80 s left)``; without figures just ``backend loading``."""
    pct = percent(loading)
    eta = loading.get("eta_seconds") if isinstance(loading, dict) else None
    parts = [f"{pct} %"] if pct is not None else []
    if isinstance(eta, int | float) and not isinstance(eta, bool) and 0 <= eta < 1e7:
        parts.append(f"about {eta:.0f} s left")
    return f"backend loading ({', '.join(parts)})" if parts else "backend loading"
