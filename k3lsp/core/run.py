"""The values of the audit core: what a front end asks for (targets), gets back per unit, and gets at the end.

Every front end (the language server, ``k3lsp audit``, ``k3lsp review``, ``k3lsp eval``)
hands the pool (``k3lsp.core.pool``) a list of :class:`Target` and reads :class:`UnitResult` values as they become
known, then one :class:`Summary`. What it shows, and how, is its own business; what counts as cached, complete,
refused, failed or not audited is decided once, here and in the pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field, fields
from pathlib import Path

from k3lsp.core.replies import DoneStats
from k3lsp.units.split import Unit
from k3lsp.wire import sanitize
from k3lsp.wire.address import unit_key
from k3lsp.witnesses.alert import Alert


@dataclass(frozen=True)
class Changes:
    """What a change under review did to a unit (``k3lsp.review.changed``; the ``audit`` request's ``changes``): the
    unit's lines it added or modified (1-based, like findings) and the function before it ("" when the change adds
    it)."""

    lines: tuple[int, ...]
    preimage: str

    def wire(self) -> dict:
        return {"lines": list(self.lines), "preimage": self.preimage}


@dataclass(frozen=True)
class Target:
    """One unit to audit and where it lives: ``path`` is what the model and its tools see (relative to
    ``root``); ``root`` confines the model's tools, and None gives it none (a file outside every workspace
    folder, whose own folder may be the home directory). ``changes``: the unit is under review."""

    root: Path | None
    path: str
    unit: Unit
    _: KW_ONLY
    alerts: tuple[Alert, ...] = ()  # analyzer alerts on the unit's lines, for the model to triage (file lines)
    changes: Changes | None = None  # the unit is under review

    @property
    def key(self) -> str:
        """What its result is filed under in the cache: the unit's content address, and whatever else the model
        was shown with it: the alerts it was asked to triage, the change under review (another question: its
        answer never stands for the unit's own audit, nor the other way round)."""
        shown = []
        if self.alerts:
            shown.append(f"alerts {[a.to_dict() for a in self.alerts]!r}")
        if self.changes is not None:
            shown.append(f"changes {self.changes.lines!r} {self.changes.preimage!r}")
        return unit_key(self.unit.key, "\n".join(shown)) if shown else self.unit.key


@dataclass(frozen=True)
class UnitResult:
    """The raw findings for one unit (protocol-valid, lines relative to the unit) and where they came from.

    ``refusal`` is set (and ``findings`` empty) for a unit the daemon refused as too long to audit; ``endpoint``
    names the daemon that audited it (None: answered from the cache)."""

    target: Target
    findings: list[dict]
    stats: DoneStats
    refusal: str | None = None
    endpoint: str | None = None

    @property
    def unit(self) -> Unit:
        return self.target.unit

    @property
    def cached(self) -> bool:
        return self.endpoint is None

    @property
    def cut_short(self) -> str | None:
        """Why the daemon stopped the audit before the model ended it (e.g. ``deadline``); None if complete,
        or never started (a refusal)."""
        return None if self.refusal is not None else self.stats.cut_short


@dataclass(frozen=True)
class Failure:
    """A unit whose request failed for a reason of its own (``code`` of kind request): never retried."""

    target: Target
    code: str
    message: str


@dataclass
class Summary:
    """What one run of units came to, for the front end to report."""

    units: int = 0
    cached: int = 0  # answered from the cache
    audited: int = 0  # answered by a daemon
    incomplete: list[UnitResult] = field(default_factory=list)  # cut short: shown, not cached, audited again
    refused: list[UnitResult] = field(default_factory=list)  # too long to audit: remembered, not sent again
    failed: list[Failure] = field(default_factory=list)
    over_limit: int = 0  # findings dropped beyond k3lsp.wire.bounds
    left: list[Target] = field(default_factory=list)  # not audited: no daemon could take them
    unavailable: str | None = None  # why units were left (the last daemon's failure, sanitised)
    dropped: list[str] = field(default_factory=list)  # daemons that failed during the run, and who took over

    def add(self, result: UnitResult) -> None:
        if result.cached:
            self.cached += 1
        else:
            self.audited += 1
        if result.refusal is not None:
            self.refused.append(result)
        elif result.cut_short is not None:
            self.incomplete.append(result)
        self.over_limit += result.stats.over_limit

    @property
    def complete(self) -> bool:
        """Every unit was looked at: nothing failed and nothing was left."""
        return not self.failed and not self.left


@dataclass
class Counters:
    """What this process asked of its daemons: exposed by ``k3lsp.status`` and the CLI's stats line."""

    units: int = 0  # units looked up
    cached: int = 0  # answered from the cache
    sent: int = 0  # audit requests sent to a daemon
    audited: int = 0  # audit requests that ended with `done`
    incomplete: int = 0  # ... of which the daemon cut short: shown, not cached
    from_store: int = 0  # ... of which the daemon answered from its result store (nothing generated)
    cancelled: int = 0
    failed: int = 0
    refused: int = 0  # too long to audit: not sent again
    retries: int = 0  # attempts repeated after a transient error
    findings: int = 0
    over_limit: int = 0  # findings dropped beyond k3lsp.wire.bounds (by the daemon or here)
    tokens: int = 0  # prompt + generated tokens, as the daemon reported them

    def audited_one(self, result: UnitResult) -> None:
        self.audited += 1
        self.incomplete += result.cut_short is not None
        self.from_store += result.stats.from_store
        self.findings += len(result.findings)
        self.over_limit += result.stats.over_limit
        self.tokens += result.stats.tokens

    @classmethod
    def total(cls, counters: Iterable[Counters]) -> Counters:
        out = cls()
        for c in counters:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(c, f.name))
        return out


Progress = Callable[[Unit, dict], None]  # (unit, the daemon's progress message)


@dataclass(frozen=True)
class Noted:
    """A daemon's progress message on a unit (prefill, decode), as a run's outcomes carry it."""

    unit: Unit
    message: dict


def describe(unit: Unit, progress: dict) -> str:
    """A progress message as one status-line note: ``copy_msg: prefill 512/1,399 tokens``, or while the daemon
    loads ``copy_msg: backend loading (42 %, weights)`` (the daemon's words sanitised, like all its text)."""
    stage, done, total = progress["stage"], progress.get("tokens"), progress.get("total")
    if stage in ("prefill", "decode") and done is not None and total:
        return sanitize.line(f"{unit.name}: {stage} {done:,}/{total:,} tokens")
    if stage == "loading" and progress.get("detail"):  # the daemon's own words: backend loading (42 %, ...)
        return sanitize.line(f"{unit.name}: {progress['detail']}")
    detail = f" {progress['detail']}" if stage == "tool" and progress.get("detail") else ""
    return sanitize.line(f"{unit.name}: {stage}{detail}")
