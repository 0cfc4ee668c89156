"""The ``rule`` request: the model writes a Coccinelle rule for one finding, streamed back as text.

Like ``explain`` (``k3lsp.core.pool``), it goes to the first usable daemon, or the next when one fails before it
says a word; the model may read code with its workspace tools meanwhile. ``tries`` carries the rules it wrote
before and what spatch said of each, so the next answer avoids them (docs/protocol.md, ``rule``).
"""

from __future__ import annotations

import contextlib

from k3lsp.core import request
from k3lsp.core.client import DaemonError
from k3lsp.core.connection import DaemonUnavailable
from k3lsp.core.pool import Pool, explain_fields
from k3lsp.core.run import Target
from k3lsp.wire.protocol import MAX_RULE_CHARS, MAX_RULE_OUTCOME_CHARS, ErrorCode, Priority

MAX_RULE_TOKENS = 4096  # a rule and a sentence around it; the model thinks within the effort's own budget


def tried(rule: str, outcome: str) -> dict[str, str]:
    """One earlier try as the request carries it: the rule and what spatch said, cut to the wire's bound."""
    return {"rule": rule[:MAX_RULE_CHARS], "outcome": outcome[:MAX_RULE_OUTCOME_CHARS] or "refused"}


def fields(target: Target, finding: dict, tries: list[dict[str, str]], effort: str) -> dict:
    """An ``explain`` request's fields (the unit, its context, the finding), the tries and a bound on the answer."""
    out = explain_fields(target, finding, effort) | {"max_tokens": MAX_RULE_TOKENS}
    return out | ({"tries": tries} if tries else {})


async def ask(pool: Pool, target: Target, finding: dict, tries: list[dict[str, str]]) -> str:
    """The model's whole answer; raises DaemonUnavailable (no daemon) or DaemonError (the request failed)."""
    reachable = await pool.reach()
    if not reachable:
        raise DaemonUnavailable(ErrorCode.DOWN, pool.why_unusable())
    sent = fields(target, finding, tries, pool.options.effort(Priority.INTERACTIVE))
    for i, conn in enumerate(reachable):
        parts: list[str] = []
        try:
            stream = conn.stream("rule", sent, lambda r: pool.answers.answer(target.root, r, target.path))
            async with contextlib.aclosing(stream) as messages:
                async for message in messages:
                    if message["kind"] == "text":
                        parts.append(message["text"])
                    elif message["kind"] == "error":
                        raise DaemonError(message["code"], message["message"])
                    elif message["kind"] == "cancelled":
                        raise DaemonError(ErrorCode.CANCELLED, "the audit daemon cancelled the rule request")
            return "".join(parts)
        except DaemonError as exc:
            if not request.concerns_daemon(exc.code):
                raise
            failed = conn.failed(exc.code, str(exc))
            if parts or i == len(reachable) - 1:
                raise failed from exc
        except DaemonUnavailable:
            if parts or i == len(reachable) - 1:
                raise
    raise DaemonUnavailable(ErrorCode.DOWN, pool.why_unusable())
