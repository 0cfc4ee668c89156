"""What a cached audit result is filed under, besides the unit's own content address (``units.Unit.key``).

A cached result stands for "what this model, asked this way, by this daemon, said about this unit", so it
is shown again only when all of these match:

- the model: the daemon's checkpoint fingerprint (``welcome.fingerprint``, backend/fingerprint.py), never
  the model's name, which any other build can carry;
- the prompt version (``welcome.limits.prompt_version``);
- the thinking effort the audit request was sent with;
- the daemon's identity (:func:`daemon_identity`): results of one daemon are never shown as another's.

A daemon whose welcome names no fingerprint has no key: its results are shown but never cached.
"""

from __future__ import annotations

import hashlib
from dataclasses import astuple, dataclass

from k3lsp import keys
from k3lsp.client import ClientOptions

DEFAULT_EFFORT = "default"  # audits that name no thinking effort get the daemon's default


@dataclass(frozen=True)
class ResultKey:
    fingerprint: str
    prompt_version: str
    effort: str
    daemon: str

    def digest(self) -> str:
        """The key as the cache stores it: a hash of every component, each length-prefixed (unambiguous)."""
        h = hashlib.sha256(b"k3lsp-result-key-v1\0")
        for part in astuple(self):
            data = part.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "big") + data)
        return h.hexdigest()


def daemon_identity(options: ClientOptions) -> str:
    """Who answers: the endpoint, and the daemon's public key when one is configured (CurveZMQ proves it).

    The one place that says what identifies a daemon, so a stronger proof (an owned ipc socket, a verified
    key) is added here and every cached result follows it.
    """
    if options.server_key is None:
        return options.endpoint
    try:
        server = keys.load_public(options.server_key).decode()
    except keys.KeyFileError:  # the connection fails on it too; no result of a working set-up matches this
        server = f"unreadable {options.server_key}"
    return f"{options.endpoint} key={server}"


def for_welcome(welcome: dict, *, effort: str, daemon: str) -> ResultKey | None:
    """The key of the results a daemon gives; None when its welcome names no checkpoint fingerprint."""
    fingerprint = welcome.get("fingerprint")
    if not fingerprint:
        return None
    return ResultKey(fingerprint, str(welcome["limits"].get("prompt_version", "")), effort, daemon)
