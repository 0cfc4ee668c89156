"""The engine's one plug-in point: what a test or a demo changes about generation, given to the engine when it is
made (``Engine(..., hooks=...)``); None in production.

Why one point. Tests and demos need to know what the model says and to make one request fail on purpose, through
the real engine (batching, sampling, the detokenizer, stop tokens, the tool parser and the agent loop all run).
Those wishes used to travel as fields of every request (``forced``, ``fault``) from the daemon through the agent
and the engine into the prefill; now a request carries only what it is for (``About``: what the agent knows of
it), and the engine asks its hooks, when it has any, at the two places where they act:

- ``answer``: when the engine admits a request, the tokens it must emit (then the end of message), or None for
  the model's own; the engine forces them with a logits processor (``decode.Forcing``), so the rest is real;
- ``reading``: before each prefill pass that reads a request; raising there fails the request at that chunk,
  alone (the engine retries its neighbours without it), as a real failure of the model would.

On a pair every rank's engine gets the same hooks (``k3-backend serve --script`` is read on every rank), so the
ranks answer and fail alike. backend/script.py's ``Script`` is the hooks of ``--script``; tests that drive the
engine directly use their own (tests/support/forcing.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from backend.engine import GenRequest


@dataclass(frozen=True)
class About:
    """What one generation is for: its unit, the request's kind (``audit``, ``explain``, ``rule``), the earlier
    rule tries the request carries, and which generation of the request it is (0-based: its round)."""

    unit: str
    kind: str = "audit"
    tries: int = 0
    generation: int = 0


class EngineHooks(Protocol):
    def answer(self, req: GenRequest, tokenizer) -> list[int] | None:
        """The token ids ``req`` must generate (the engine then adds the end of message), or None."""
        ...

    def reading(self, req: GenRequest) -> None:
        """Called before each prefill pass that reads ``req``: raise to fail it there."""
        ...
