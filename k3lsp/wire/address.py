"""What an audit result is filed under, and when it may be filed at all: computed the same way by both programs.

Three things here, one per question both the editor's cache and the daemon's result store ask:

- **the unit's address** (:func:`unit_key`): its text and context, hashed; the same function gives the same
  key in every process, wherever the function moves in its file;
- **the result key** (:class:`ResultKey`): who answered, and how it was asked (below);
- **completeness** (:func:`cut_short`): only an audit the model ended itself is kept; one the daemon cut short
  (deadline, budget, loop guard) is shown once and audited again.

A cached result stands for "what this model, asked this way, by this daemon, said about this unit", so it
is shown again only when all of these match:

- the model: the daemon's checkpoint fingerprint (``welcome.fingerprint``, backend/fingerprint.py), never
  the model's name, which any other build can carry;
- the prompt version (``welcome.limits.prompt_version``);
- the thinking effort the audit request was sent with (a result at a higher effort answers a request at a
  lower one: the model thought at least as long);
- the daemon's identity, as the client established it before sending anything
  (``DaemonClient.daemon_identity``: its CurveZMQ server key, its private ipc socket, or an insecure
  endpoint): results of one daemon are never shown as another's.

A daemon whose welcome names no fingerprint, or whose identity is unknown, has no key: its results are shown
but never cached.

With several daemons configured (the ``endpoint`` setting as a list, ``k3lsp.core.pool``), each result is still
filed under the daemon that gave it, and a lookup accepts the results of every configured daemon that serves
the same checkpoint with the same prompt version (``same_answers``): a unit audited on one Mac pair is not
audited again on the other, while a daemon that is not configured (an impostor on a port) never supplies one.
"""

from __future__ import annotations

import hashlib
from dataclasses import astuple, dataclass

from k3lsp.wire.protocol import EFFORTS

COMPLETE = "stop"  # the finish reason of an audit the model ended itself, on its end-of-message token


def unit_key(text: str, context: str) -> str:
    """The content address of a unit: the same text and context give the same key in every process."""
    h = hashlib.sha256()
    h.update(b"k3lsp-unit-v1\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    h.update(context.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def cut_short(stats: dict) -> str | None:
    """The finish reason of an incomplete audit from its ``done`` stats; None for a complete one. A missing
    or odd reason counts as incomplete: only a daemon that says the model finished gets its result kept."""
    reason = stats.get("finish_reason")
    if reason == COMPLETE:
        return None
    return reason[:64] if isinstance(reason, str) and reason else "unknown"


@dataclass(frozen=True)
class ResultKey:
    """A daemon's results; each thinking effort files them apart (``digest``)."""

    fingerprint: str
    prompt_version: str
    daemon: str

    def digest(self, effort: str, variant: str = "") -> str:
        """The key as the cache stores it: a hash of every component, each length-prefixed (unambiguous).
        ``variant`` names a way of asking beyond the effort (the refutation turn's threshold), "" for none."""
        h = hashlib.sha256(b"k3lsp-result-key-v2\0")
        for part in (*astuple(self), effort, *((variant,) if variant else ())):
            data = part.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "big") + data)
        return h.hexdigest()

    def same_answers(self, other: ResultKey) -> bool:
        """Whether another daemon's results answer for this one's: the same checkpoint and prompt version (the
        user configured both, so each proved its identity; which one audited a unit does not change the answer)."""
        return (self.fingerprint, self.prompt_version) == (other.fingerprint, other.prompt_version)

    def answering(self, effort: str, variant: str = "") -> list[str]:
        """The keys whose results answer a request at ``effort``: its own first, then those of higher efforts."""
        return [self.digest(e, variant) for e in EFFORTS[EFFORTS.index(effort) :]]


def for_welcome(welcome: dict, *, daemon: str | None) -> ResultKey | None:
    """The key of the results a daemon gives; None when its welcome names no checkpoint fingerprint or its
    identity is unknown."""
    fingerprint = welcome.get("fingerprint")
    if not fingerprint or not daemon:
        return None
    return ResultKey(fingerprint, str(welcome["limits"].get("prompt_version", "")), daemon)
