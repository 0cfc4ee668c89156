"""Scripted answers (`k3-backend serve --script FILE`): deterministic model output through the REAL engine.

Tests and demos need to know what the model says, but a fake engine would skip the code that matters.
A script instead picks the tokens the real engine is forced to emit, so batching, sampling, the detokenizer,
stop tokens, the tool parser and the agent loop all really run: a ``Script`` is the engine's hooks
(backend/hooks.py), given to the engine of every rank, and goes by what each request is for (``GenRequest.about``).

File format (JSON)::

    [{"unit": "<unit name or *>", "turns": ["<assistant text of turn 1>", "<turn 2>", ...]}, ...]

An entry may also say which requests it answers: ``"kind"`` (``audit``, ``explain`` or ``rule``; without it, every
kind) and, for ``rule`` requests, ``"tries"`` (the number of earlier tries the request carries: 0 for the first
rule asked for a finding, 1 for the retry after it failed, ...), so one unit can be audited and have rules written,
and each retry of a rule gets its own answer.

The n-th generation of a request for a matching unit (the first entry that matches wins) is forced to
``encode(turn n)``, then the end of message (the engine's forcing processor appends
eos). A turn may instead be ``{"repeat": "<text>", "tokens": N}``: the text's tokens repeated to N tokens,
a generation that loops (for the loop guard, which fires long before the end of message when N is large
enough). A turn ``{"fail": "<message>"}`` makes that generation's first prefill chunk raise, on every rank:
a deterministic failure of one request, for tests of fault containment. Generations past the last turn, and
units no entry matches, get the model's own output.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from k3lsp.wire.protocol import MAX_RULE_TRIES, REQUEST_KINDS

if TYPE_CHECKING:
    from backend.engine import GenRequest

MAX_REPEAT_TOKENS = 100_000


class ScriptError(ValueError):
    """The script file is not valid; the message says where."""


class ScriptedFault(RuntimeError):
    """The failure a ``{"fail": ...}`` turn asks for: a real error in the request's prefill, on every rank."""


@dataclass(frozen=True)
class Repeat:
    text: str
    tokens: int


@dataclass(frozen=True)
class Fail:
    message: str


Turn = str | Repeat | Fail


@dataclass(frozen=True)
class Entry:
    unit: str
    turns: tuple[Turn, ...]
    kind: str | None = None  # None: every kind
    tries: int | None = None  # None: any number of tries (only for kind rule)

    def answers(self, unit: str, kind: str, tries: int) -> bool:
        return self.unit in ("*", unit) and self.kind in (None, kind) and self.tries in (None, tries)


@dataclass(frozen=True)
class Script:
    entries: tuple[Entry, ...] = ()

    def turn(self, unit: str, n: int, kind: str = "audit", tries: int = 0) -> Turn | None:
        """The scripted n-th (0-based) turn of a ``kind`` request for ``unit`` (a ``rule`` request with ``tries``
        earlier tries), or None for the model's own output."""
        for entry in self.entries:
            if entry.answers(unit, kind, tries):
                return entry.turns[n] if n < len(entry.turns) else None
        return None

    def _turn_of(self, req: GenRequest) -> Turn | None:
        about = req.about
        return None if about is None else self.turn(about.unit, about.generation, about.kind, about.tries)

    def answer(self, req: GenRequest, tokenizer) -> list[int] | None:
        """The token ids the engine must emit for this generation (before eos), or None (hooks.EngineHooks)."""
        turn = self._turn_of(req)
        if turn is None or isinstance(turn, Fail):
            return None
        if isinstance(turn, Repeat):
            period = _encode(tokenizer, turn.text)
            return (period * (turn.tokens // len(period) + 1))[: turn.tokens]
        return _encode(tokenizer, turn)

    def reading(self, req: GenRequest) -> None:
        """Raise ScriptedFault when this generation's turn is a failure (hooks.EngineHooks)."""
        turn = self._turn_of(req)
        if isinstance(turn, Fail):
            raise ScriptedFault(turn.message)


def _encode(tokenizer, text: str) -> list[int]:
    ids = list(_encoded(tokenizer, text))
    if not ids:
        raise ScriptError(f"script turn {text!r:.60} encodes to no tokens")
    return ids


@functools.lru_cache(maxsize=256)
def _encoded(tokenizer, text: str) -> tuple[int, ...]:
    """A turn is encoded once, not for every generation (answer() runs in the engine's step)."""
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def load_script(path: str | Path) -> Script:
    """Read and check a script file; raises ScriptError with a clear message for anything malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScriptError(f"cannot read script {path}: {exc}") from exc
    return parse_script(data)


def parse_script(data: object) -> Script:
    if not isinstance(data, list):
        raise ScriptError("a script is a JSON list of {unit, turns} objects")
    return Script(tuple(_entry(item, f"[{i}]") for i, item in enumerate(data)))


def _entry(item: object, where: str) -> Entry:
    if not isinstance(item, dict) or not isinstance(item.get("unit"), str) or not isinstance(item.get("turns"), list):
        raise ScriptError(f'script{where}: expected {{"unit": str, "turns": list}}')
    kind, tries = item.get("kind"), item.get("tries")
    if kind is not None and kind not in REQUEST_KINDS:
        raise ScriptError(f"script{where}.kind: {kind!r:.40} is not one of {', '.join(REQUEST_KINDS)}")
    if tries is not None and kind != "rule":
        raise ScriptError(f'script{where}.tries: only an entry of "kind": "rule" counts tries')
    if tries is not None and (
        isinstance(tries, bool) or not isinstance(tries, int) or not 0 <= tries <= MAX_RULE_TRIES
    ):
        raise ScriptError(f"script{where}.tries: {tries!r:.40} is not a number of tries in 0..{MAX_RULE_TRIES}")
    turns = tuple(_turn(t, f"{where}.turns[{j}]") for j, t in enumerate(item["turns"]))
    return Entry(item["unit"], turns, kind, tries)


def _turn(turn: object, where: str) -> Turn:
    if isinstance(turn, str) and turn:
        return turn
    if isinstance(turn, dict) and isinstance(turn.get("fail"), str) and turn["fail"]:
        return Fail(turn["fail"])
    if isinstance(turn, dict) and isinstance(turn.get("repeat"), str) and turn["repeat"]:
        tokens = turn.get("tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and 1 <= tokens <= MAX_REPEAT_TOKENS:
            return Repeat(turn["repeat"], tokens)
    raise ScriptError(
        f'script{where}: a turn is a non-empty string, {{"repeat": str, "tokens": 1..{MAX_REPEAT_TOKENS}}} '
        'or {"fail": str}'
    )
