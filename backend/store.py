"""The daemon's result store: one team's complete audits, answered again to any authorised client at once.

A pair of Macs serves a whole team, and ten people opening one repository ask it about the same functions
ten times. Each editor keeps its own cache (``k3lsp.wire.cache``), but only the daemon sees everyone's requests,
so it keeps the results too: an ``audit`` whose key is stored is answered from here with no generation at
all (``stats.from_store`` true, ``generated_tokens`` 0), and one that is not is audited and, if complete,
stored for the next person.

The storage is the editor's own result cache (``k3lsp.wire.cache.ResultCache``: sqlite, bounded in bytes with
least-recently-used eviction, 0600 in a 0700 directory, a full disk told apart from corruption), and the key
is built the way the editor builds its own (``k3lsp.wire.address``): the unit's content address (text and
context, ``k3lsp.wire.address.unit_key``) under a result key naming what answers (the checkpoint fingerprint, and
the script when answers are scripted: a scripted demo must never answer for the model), the prompt version
and the thinking effort. A result at a higher effort answers a request at a lower one (the model thought at
least as long). Only complete audits are stored (finish reason ``stop``, as ``k3lsp.wire.address.cut_short`` decides for
the editor's cache): a cut-short audit is audited again next time, never kept as "no findings".

Who may read it is who may send an audit at all: requests are refused before they reach the store when the
sender's key is not (or no longer) in the allow-list (backend/daemon.py). A request with ``fresh: true``
(the editor's re-audit) skips the lookup, and its complete result replaces the stored one.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import platformdirs

from backend.agent import Send
from backend.script import Script
from k3lsp.wire.address import ResultKey, cut_short, unit_key
from k3lsp.wire.cache import CachedResult, ResultCache

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
FILE_NAME = "store.sqlite3"
ENV_PATH = "K3_BACKEND_STORE"
STORE = "k3-backend-store"  # the result key's daemon part: every result here is this daemon's own
# Work that a stored answer did not cost: zeroed in its stats (what the stored audit cost stays in `stored`).
SPENT = (
    "prompt_tokens",
    "cached_tokens",
    "generated_tokens",
    "reasoning_tokens",
    "response_tokens",
    "tool_calls",
    "rounds",
    "batch_size_peak",
)


def default_path() -> Path | None:
    """``$K3_BACKEND_STORE`` (``none``: no store), else in the platform's user cache directory for k3-backend
    (``~/Library/Caches/k3-backend`` on macOS)."""
    named = os.environ.get(ENV_PATH)
    if named:
        return None if named == "none" else Path(named)
    return Path(platformdirs.user_cache_dir("k3-backend")) / FILE_NAME


class ResultStore:
    """Complete audit results of every client, keyed by what decides the answer (see the module doc)."""

    def __init__(self, path: Path, max_bytes: int, *, script: Script, prompt_version: str):
        self._cache = ResultCache(path, max_bytes)
        self._script = script
        self._prompt_version = prompt_version
        self.answered = 0  # audit requests answered from the store
        self.kept = 0  # complete audits stored
        self.fresh = 0  # requests that asked for a fresh audit

    async def answer(
        self, req: dict, effort: str, fingerprint: str, send: Send, run: Callable[[Send], Awaitable[dict]]
    ) -> dict:
        """The ``done`` stats of one audit request: from the store (its findings sent through ``send``) or from
        ``run(send)``, whose findings are recorded on their way out and stored if the audit was complete.
        ``fingerprint`` is the loaded checkpoint's: given per request, as a hub model has none before it loads."""
        unit = unit_key(req["code"], req["context"])
        key = ResultKey(self._answering_model(fingerprint), self._prompt_version, STORE)
        if req.get("fresh"):
            self.fresh += 1
        else:
            started = time.monotonic()
            hit = await asyncio.to_thread(self._lookup, unit, key, effort)
            if hit is not None:
                for finding in hit.findings:
                    await send("finding", finding=finding)
                self.answered += 1
                return stored_stats(hit.stats, time.monotonic() - started)
        findings: list[dict] = []

        async def recording(kind: str, **fields: Any) -> None:
            await send(kind, **fields)  # sent first: a finding that could not go out was not given
            if kind == "finding":
                findings.append(fields["finding"])

        stats = await run(recording)
        if cut_short(stats) is None:
            await asyncio.to_thread(self._cache.put, unit, key.digest(effort), findings, stats)
            self.kept += 1
        return stats

    def _answering_model(self, fingerprint: str) -> str:
        """What gives the answers: the checkpoint, or the checkpoint forced through a script (a hash of both)."""
        if not self._script.entries:
            return fingerprint
        return hashlib.sha256(f"{fingerprint}\0scripted\0{self._script!r}".encode()).hexdigest()

    def _lookup(self, unit: str, key: ResultKey, effort: str) -> CachedResult | None:
        return next(
            (hit for digest in key.answering(effort) if (hit := self._cache.get(unit, digest)) is not None), None
        )

    def stats(self) -> dict:
        """What ``status`` shows: sizes and counters, never a key, a path inside a workspace or any code."""
        cache = self._cache.stats()
        return {
            "entries": cache["entries"],
            "bytes": cache["result_bytes"],
            "max_bytes": cache["max_bytes"],
            "evicted": cache["evicted"],
            "answered": self.answered,
            "kept": self.kept,
            "fresh": self.fresh,
        }

    def close(self) -> None:
        self._cache.close()


def stored_stats(stats: dict, seconds: float) -> dict:
    """The stats of an answer from the store: nothing was generated for it; what the stored audit cost is kept
    under ``stored``."""
    return (
        stats
        | dict.fromkeys(SPENT, 0)
        | {
            "turns": [],
            "seconds": round(seconds, 4),
            "from_store": True,
            "stored": {name: stats.get(name, 0) for name in ("prompt_tokens", "generated_tokens", "seconds")},
        }
    )
