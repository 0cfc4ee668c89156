"""The language server with a fake auditor: the LSP logic without a daemon, a checkpoint or mlx.

``python -m tests.support.fake_auditor SCRIPT`` runs the real ``k3lsp`` server over stdio (``k3lsp.server.create``)
with a :class:`FakeAuditor` in place of the daemons. The fake answers from SCRIPT, a JSON file read again at
every call, so a test can change what it says mid-session (the daemon goes down, comes back)::

    {"state": "connected" | "down" | "unauthorized",   # how the "daemon" answers (default connected)
     "units": {"<unit name>": {"findings": [...],       # protocol findings, lines relative to the unit
                               "refusal": "...",        # refused as too long to audit
                               "cut_short": "deadline", # the audit's finish reason: shown, not cached
                               "progress": [{...}],     # progress messages before the result
                               "hold": true,            # never answers: until the session cancels it
                               "fail": true}},          # the daemon goes down during this unit
     "explain": ["pieces", ...] | {"error": "..."}}

Units not named have no findings. Complete results go into the session's real result cache (under one result
key), so the session's cache logic is what a test sees. The fake records what it was asked (``calls``, in the
``backend`` part of ``k3lsp.status``). It implements ``k3lsp.session.AuditService``, which
tests/lsp/test_server_logic.py checks against ``k3lsp.pool.Pool``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from k3lsp.auditor import (
    BackendState,
    BackendUnavailable,
    Counters,
    Lookup,
    Progress,
    UnitResult,
    not_connected,
    state_for,
)
from k3lsp.cache import ResultCache
from k3lsp.client import BackendError
from k3lsp.options import Options
from k3lsp.session import AuditorFactory
from k3lsp.units import Unit

RESULT_KEY = "fake-auditor"  # what its results are cached under
REPO = Path(__file__).resolve().parents[2]


class FakeAuditor:
    """Scripted answers per unit name; used from the server's event loop, like ``Pool``."""

    def __init__(
        self,
        script: Path,
        options: Options,
        cache: ResultCache,
        *,
        on_state: Callable[[BackendState], None] | None = None,
        on_tool: Callable[[dict, bool, str], None] | None = None,
    ):
        self.script, self.options, self.cache = script, options, cache
        self.counters = Counters()
        self.calls: list[dict] = []
        self._on_state = on_state
        self._state, self._message = "disconnected", not_connected(options.endpoint)
        self._running = 0
        self._reached = False  # answered once: results may come from the cache while it is down

    @classmethod
    def factory(cls, script: Path) -> AuditorFactory:
        return functools.partial(cls, script)

    def _read(self) -> dict:
        return json.loads(self.script.read_text())

    @property
    def state(self) -> BackendState:
        return BackendState(self._state, 0, self._running, self._message)

    def _set_state(self, state: str, message: str) -> None:
        self._state, self._message = state, message
        if self._on_state is not None:
            self._on_state(self.state)

    async def _connect(self) -> dict:
        """The script's state now: connecting then connected, or BackendUnavailable with its code."""
        script = self._read()
        code = script.get("state", "connected")
        if code != "connected":
            message = f"the k3 audit daemon at {self.options.endpoint} is not reachable ({code})"
            self._set_state(state_for(code), message)
            raise BackendUnavailable(code, message)
        if self._state != "connected":
            self._set_state("connecting", f"connecting to {self.options.endpoint}")
            self._set_state("connected", "fake (0 experts, 1 ranks)")
        self._reached = True
        return script

    async def reconfigure(self, options: Options) -> None:
        old, self.options = self.options, options
        connection = {"server_key": options.server_key, "client_key": options.client_key, "insecure": options.insecure}
        self.calls.append({"op": "reconfigure", "endpoint": options.endpoint} | connection)
        if old.endpoint != options.endpoint or old.client_key != options.client_key:
            self._reached = False
            self._set_state("disconnected", not_connected(options.endpoint))

    async def close(self) -> None:
        self.calls.append({"op": "close"})

    async def lookup(self, units: Sequence[Unit], *, priority: str = "interactive", force: bool = False) -> Lookup:
        self.calls.append({"op": "lookup", "units": [u.name for u in units], "priority": priority, "force": force})
        try:
            await self._connect()
            down = None
        except BackendUnavailable as exc:
            if not self._reached:
                raise
            down = exc
        hits, misses = [], []
        for unit in units:
            self.counters.units += 1
            row = None if force else self.cache.get(unit.key, RESULT_KEY)
            if row is None:
                misses.append(unit)
            else:
                self.counters.cached += 1
                hits.append(UnitResult(unit, list(row.findings), cached=True, stats=dict(row.stats)))
        return Lookup(hits, misses, down)

    async def audit_uncached(
        self,
        root: Path | None,
        path: str,
        units: Sequence[Unit],
        *,
        priority: str = "interactive",
        fresh: bool = False,
        on_progress: Progress | None = None,
    ) -> AsyncIterator[UnitResult]:
        self.calls.append(
            {
                "op": "audit",
                "units": [u.name for u in units],
                "path": path,
                "root": None if root is None else str(root),
                "priority": priority,
                "fresh": fresh,
                "effort": self.options.effort(priority),
            }
        )
        for unit in units:
            script = await self._connect()
            spec = script.get("units", {}).get(unit.name, {})
            self.counters.sent += 1
            self._running += 1
            try:
                for message in spec.get("progress", []):
                    if on_progress is not None:
                        on_progress(unit, {"kind": "progress"} | message)
                if spec.get("hold"):
                    await asyncio.Event().wait()  # until the session cancels the audit
            except asyncio.CancelledError:
                self.counters.cancelled += 1
                raise
            finally:
                self._running -= 1
            if spec.get("fail"):
                self._set_state("down", f"the k3 audit daemon at {self.options.endpoint} stopped answering")
                raise BackendUnavailable("down", self._message)
            yield self._result(unit, spec)

    def _result(self, unit: Unit, spec: dict) -> UnitResult:
        if "refusal" in spec:
            self.counters.refused += 1
            return UnitResult(unit, [], cached=False, refusal=spec["refusal"])
        result = UnitResult(
            unit, spec.get("findings", []), cached=False, stats={"finish_reason": spec.get("cut_short", "stop")}
        )
        if result.cut_short is None:
            self.cache.put(unit.key, RESULT_KEY, result.findings, result.stats)
        else:
            self.counters.incomplete += 1
        self.counters.audited += 1
        self.counters.findings += len(result.findings)
        return result

    async def explain(self, root: Path | None, path: str, unit: Unit, finding: dict) -> AsyncIterator[str]:
        self.calls.append({"op": "explain", "unit": unit.name, "path": path, "cwe": finding.get("cwe")})
        answer = (await self._connect()).get("explain", [])
        if isinstance(answer, dict):
            raise BackendError("internal", answer["error"])
        for piece in answer:
            yield piece

    async def status(self) -> dict:
        return {
            "endpoint": self.options.endpoint,
            "state": asdict(self.state),
            "counters": asdict(self.counters),
            "welcome": None,
            "backend": {"calls": self.calls},
        }


@dataclass(frozen=True)
class FakeScript:
    """A script file for the fake, and the command that serves a language server answering from it."""

    path: Path

    def write(self, script: dict) -> None:
        self.path.write_text(json.dumps(script))

    @property
    def server(self) -> list[str]:
        return [sys.executable, "-m", "tests.support.fake_auditor", str(self.path)]

    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(REPO)}  # `tests` is not installed: found from the repository


if __name__ == "__main__":
    from k3lsp.server import serve_stdio

    serve_stdio(FakeAuditor.factory(Path(sys.argv[1])))
