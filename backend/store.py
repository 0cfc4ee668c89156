"""The daemon's result store: one team's complete audits, answered again at once to whoever asks the same.

A pair of Macs serves a whole team, and ten people opening one repository ask it about the same functions
ten times. Each editor keeps its own cache (``k3lsp.wire.cache``), but only the daemon sees everyone's requests,
so it keeps the results too: an ``audit`` whose result is stored is answered from here with no generation
at all (``stats.from_store`` true, ``generated_tokens`` 0), and one that is not is audited and, if complete,
stored for the next person.

A stored result stands for "what the model said when it was given exactly this", so it answers a request
only when the model would be given exactly the same now (docs/team.md, the store's trust model):

- **the same prompt and budget**: results are filed under ``Agent.seen``, a hash of the rendered prompt
  (system prompt, tools, the unit's path, name and first line, its code and context, the changes of a unit
  under review, the thinking effort), the token budget, the sampling and the tool-round limit, under the
  answering model (the checkpoint's fingerprint, and the script when answers are scripted: a scripted demo
  must never answer for the model) and the prompt version. Nothing a request leaves out of the key can
  change the answer it gets. A result at a higher effort, with that effort's own budget, answers a request
  at a lower one (the model thought at least as long);
- **the same tool answers**: what the model read through its tools came from the requesting editor's
  workspace. Each stored result keeps its tool calls with a hash of every answer; before it answers
  another request, the same calls are asked of the new requester's editor, in order, and the result is
  used only if every answer is the same (else the model is asked). A result that used no tools needs no
  such check. Whoever answered a tool call with text of their own therefore decides only what they
  themselves get back;
- **one result per person**: every result is filed under its requester's identity as well (a hash of the
  User-Id the gate gave the connection). A lookup tries the asker's own result first, then the others'
  oldest first (at most ``MAX_REPLAYS`` of those that need their tool calls asked again). A request with
  ``fresh: true`` (the editor's re-audit) skips the lookup, and its complete result replaces the asker's
  own, nobody else's.

The storage is the editor's own result cache (``k3lsp.wire.cache.ResultCache``: sqlite, bounded in bytes with
least-recently-used eviction, 0600 in a 0700 directory, a full disk told apart from corruption): its unit
key is the key above, its result key the requester's. Only complete audits are stored (finish reason
``stop``, as ``k3lsp.wire.address.cut_short`` decides for the editor's cache): a cut-short audit is audited again next
time, never kept as "no findings". Who may read it is who may send an audit at all: requests are refused
before they reach the store when the sender's key is not (or no longer) in the allow-list (backend/daemon.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import platformdirs

from backend.agent import AskTool, Send
from backend.hooks import EngineHooks
from k3lsp.wire.address import cut_short
from k3lsp.wire.cache import CachedResult, ResultCache

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
FILE_NAME = "store.sqlite3"
ENV_PATH = "K3_BACKEND_STORE"
MAX_REPLAYS = 3  # others' results whose tool calls one lookup asks again at most
TOOL_ANSWERS = "tool_answers"  # in a stored result's stats: [[tool, args, answer hash], ...]; never sent
VERDICTS = "verdicts"  # in a stored result's stats: the `verdict` messages it sent, replayed after its findings
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
Run = Callable[[Send, AskTool], Awaitable[dict]]  # run(send, ask_tool): the model's loop, its done stats


def default_path() -> Path | None:
    """``$K3_BACKEND_STORE`` (``none``: no store), else in the platform's user cache directory for k3-backend
    (``~/Library/Caches/k3-backend`` on macOS)."""
    named = os.environ.get(ENV_PATH)
    if named:
        return None if named == "none" else Path(named)
    return Path(platformdirs.user_cache_dir("k3-backend")) / FILE_NAME


class ResultStore:
    """Complete audit results of every client, filed by what the model saw and by whom (see the module doc)."""

    def __init__(self, path: Path, max_bytes: int, *, hooks: EngineHooks | None, prompt_version: str):
        """``hooks``: the engine's (a script of answers), when the model does not answer alone."""
        self._cache = ResultCache(path, max_bytes)
        self._hooks = hooks
        self._prompt_version = prompt_version
        self.answered = 0  # audit requests answered from the store
        self.replayed = 0  # ... of which after asking their tool calls again
        self.mismatched = 0  # stored results passed over: a tool answered the asker otherwise
        self.kept = 0  # complete audits stored
        self.fresh = 0  # requests that asked for a fresh audit

    async def answer(
        self,
        seen: list[str],
        fingerprint: str,
        owner: str,
        fresh: bool,
        send: Send,
        ask_tool: AskTool,
        run: Run,
    ) -> dict:
        """The ``done`` stats of one audit request: from the store (its findings sent through ``send``) or from
        ``run``, whose findings and tool answers are recorded on their way and stored if the audit was complete.

        ``seen``: ``Agent.seen`` of the request (its own view first); ``fingerprint``: the loaded checkpoint's,
        given per request, as a hub model has none before it loads; ``owner``: the requester's User-Id;
        ``ask_tool``: a tool round trip to the requester's editor."""
        keys = [self._key(fingerprint, view) for view in seen]
        mine = _owner(owner)
        if fresh:
            self.fresh += 1
        else:
            started = time.monotonic()
            hit = await self._lookup(keys, mine, ask_tool)
            if hit is not None:
                for finding in hit.findings:
                    await send("finding", finding=finding)
                for verdict in hit.stats.get(VERDICTS) or []:
                    if isinstance(verdict, dict):
                        await send("verdict", **verdict)
                self.answered += 1
                return stored_stats(hit.stats, time.monotonic() - started)
        findings: list[dict] = []
        verdicts: list[dict] = []
        answers: list[list] = []

        async def recording(kind: str, **fields: Any) -> None:
            await send(kind, **fields)  # sent first: a finding that could not go out was not given
            if kind == "finding":
                findings.append(fields["finding"])
            elif kind == "verdict":
                verdicts.append(fields)

        async def asking(tool: str, args: dict) -> tuple[bool, str]:
            ok, result = await ask_tool(tool, args)
            answers.append([tool, args, _answer_hash(ok, result)])
            return ok, result

        stats = await run(recording, asking)
        if cut_short(stats) is None:
            try:
                kept = stats | {TOOL_ANSWERS: answers, VERDICTS: verdicts}
                await asyncio.to_thread(self._cache.put, keys[0], mine, findings, kept)
                self.kept += 1
            except (TypeError, ValueError) as exc:  # a tool call's arguments JSON cannot hold: not stored
                log.warning("an audit result was not stored: %s", exc)
        return stats

    def _key(self, fingerprint: str, view: str) -> str:
        """Where the results of one view are filed: the view under the answering model and the prompt version."""
        answering = fingerprint
        if self._hooks is not None:  # the checkpoint forced through a script: a hash of both
            answering = hashlib.sha256(f"{fingerprint}\0scripted\0{self._hooks!r}".encode()).hexdigest()
        return hashlib.sha256(f"k3-backend-store-v2\0{answering}\0{self._prompt_version}\0{view}".encode()).hexdigest()

    async def _lookup(self, keys: list[str], mine: str, ask_tool: AskTool) -> CachedResult | None:
        """The first stored result whose tool answers are the asker's too: per key, the asker's own, then the
        others' oldest first; at most MAX_REPLAYS others' results that used tools are asked again."""
        replays = 0
        for key in keys:
            owners = await asyncio.to_thread(self._cache.under, key)
            for owner in sorted(owners, key=lambda o: o != mine):  # stable: the others stay oldest first
                hit = await asyncio.to_thread(self._cache.get, key, owner)
                calls = hit.stats.get(TOOL_ANSWERS) if hit is not None else None
                if not isinstance(calls, list):  # unreadable, or stored without its tool answers: never shared
                    continue
                if not calls:
                    return hit
                if owner != mine:
                    if replays >= MAX_REPLAYS:
                        continue
                    replays += 1
                if await _same_answers(calls, ask_tool):
                    self.replayed += 1
                    return hit
                self.mismatched += 1
        return None

    def stats(self) -> dict:
        """What ``status`` shows: sizes and counters, never a key, a path inside a workspace or any code."""
        cache = self._cache.stats()
        return {
            "entries": cache["entries"],
            "bytes": cache["result_bytes"],
            "max_bytes": cache["max_bytes"],
            "evicted": cache["evicted"],
            "answered": self.answered,
            "replayed": self.replayed,
            "mismatched": self.mismatched,
            "kept": self.kept,
            "fresh": self.fresh,
        }

    def close(self) -> None:
        self._cache.close()


async def _same_answers(calls: list, ask_tool: AskTool) -> bool:
    """Ask the stored tool calls again, in order; whether every answer is the one stored (stops at the first
    that differs)."""
    for call in calls:
        if not (isinstance(call, list) and len(call) == 3 and isinstance(call[1], dict)):
            return False
        tool, args, stored = call
        if _answer_hash(*await ask_tool(str(tool), args)) != stored:
            return False
    return True


def _answer_hash(ok: bool, result: str) -> str:
    return hashlib.sha256(json.dumps([bool(ok), result]).encode("utf-8", "surrogatepass")).hexdigest()


def _owner(user: str) -> str:
    """A requester's results are filed under a hash of its User-Id (no key in the store's file)."""
    return hashlib.sha256(f"k3-backend-store-owner\0{user}".encode()).hexdigest()


def stored_stats(stats: dict, seconds: float) -> dict:
    """The stats of an answer from the store: nothing was generated for it; what the stored audit cost is kept
    under ``stored``; its tool answers stay in the store."""
    out = {name: value for name, value in stats.items() if name not in (TOOL_ANSWERS, VERDICTS)}
    return (
        out
        | dict.fromkeys(SPENT, 0)
        | {
            "turns": [],
            "seconds": round(seconds, 4),
            "from_store": True,
            "stored": {name: stats.get(name, 0) for name in ("prompt_tokens", "generated_tokens", "seconds")},
        }
    )
