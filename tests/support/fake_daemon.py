"""The language server on a fake daemon: the whole editor side, audit core included, without a daemon or mlx.

``python -m tests.support.fake_daemon SCRIPT`` runs the real ``k3lsp`` server over stdio
(``k3lsp.lsp.server.create``) whose connections to the daemons are :class:`FakeDaemon` transports instead of
sockets. Everything above the socket is the real code: the pool, its queue and priority gate, the cache policy,
retries and fail-over, the connection state machine, the findings pipeline. The fake answers from SCRIPT, a
JSON file read again at every call, so a test can change what it says mid-session (the daemon goes down, comes
back)::

    {"state": "connected" | "<an error code>",          # how the "daemon" answers a hello (default connected)
     "hello_seconds": 30,                               # a hello takes this long (a daemon starting up)
     "units": {"<unit name>": {"findings": [...],       # protocol findings, lines relative to the unit
                               "refusal": "...",        # refused as too long to audit (error too_long)
                               "cut_short": "deadline", # the audit's finish reason: shown, not cached
                               "progress": [{...}],     # progress messages before the result
                               "hold": true,            # never answers: until the request is cancelled
                               "fail": "down"}},        # the request fails with this code, and the daemon is
                                                        # gone: the script's state becomes that code
     "explain": ["pieces", ...] | {"error": "..."}}

Units not named have no findings. The fake records what it was asked (``calls``, in the daemon's own status:
the ``backend`` part of ``k3lsp.status``). It has the public surface of ``k3lsp.core.client.DaemonClient`` that
``k3lsp.core.connection.Transport`` names, which tests/lsp/test_server_logic.py checks.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from k3lsp.core.client import ClientOptions, DaemonError, ToolHandler
from k3lsp.core.connection import TransportFactory
from k3lsp.wire import protocol

REPO = Path(__file__).resolve().parents[2]
WELCOME = {
    "protocol": protocol.VERSION,
    "server": "fake",
    "model": "fake",
    "fingerprint": "fake-checkpoint",
    "experts": 0,
    "ranks": 1,
    "limits": {"prompt_version": "fake-1"},
}
_CALLS: dict[Path, list[dict]] = {}  # per script: what every connection of the server was asked


class FakeDaemon:
    """Answers from a script; used from the server's event loop, like the real client."""

    def __init__(self, script: Path, options: ClientOptions):
        self.script, self.options = script, options
        self.daemon_identity: str | None = None
        self.calls = _CALLS.setdefault(script, [])

    @classmethod
    def factory(cls, script: Path) -> TransportFactory:
        return functools.partial(cls, script)

    def _read(self) -> dict:
        return json.loads(self.script.read_text())

    def _answering(self) -> dict:
        """The script now; DaemonError with its code when the script says the daemon is not there."""
        script = self._read()
        code = script.get("state", "connected")
        if code != "connected":
            raise DaemonError(code, f"the k3 audit daemon at {self.options.endpoint} is not reachable ({code})")
        return script

    def identify(self) -> str:
        self.daemon_identity = f"fake:{self.options.endpoint}"
        return self.daemon_identity

    async def connect(self) -> dict:
        self.identify()
        opts = self.options
        connection = {"server_key": str(opts.server_key or ""), "client_key": str(opts.client_key or "")}
        self.calls.append({"op": "hello", "endpoint": opts.endpoint} | connection | {"insecure": opts.insecure})
        await asyncio.sleep(self._read().get("hello_seconds", 0))
        self._answering()
        return dict(WELCOME)

    async def close(self) -> None:
        return None

    async def status(self, timeout: float = 5.0) -> dict:
        self._answering()
        return {"calls": list(self.calls)}

    async def stream(self, kind: str, fields: dict, *, tools: ToolHandler | None = None) -> AsyncIterator[dict]:
        script = self._answering()
        self.calls.append(
            {
                "op": kind,
                "unit": fields["unit"],
                "path": fields["path"],
                "priority": fields.get("priority"),
                "effort": fields.get("thinking_effort"),
                "fresh": fields.get("fresh", False),
                "cwe": fields.get("finding", {}).get("cwe"),
                "changes": fields.get("changes"),  # a unit under review (k3lsp review)
            }
        )
        if kind == "explain":
            answer = script.get("explain", [])
            if isinstance(answer, dict):
                yield {"kind": "error", "code": "internal", "message": answer["error"]}
                return
            for piece in answer:
                yield {"kind": "text", "text": piece}
            yield {"kind": "done", "stats": {}}
            return
        spec = script.get("units", {}).get(fields["unit"], {})
        for message in spec.get("progress", []):
            yield {"kind": "progress"} | message
        if spec.get("hold"):
            await asyncio.Event().wait()  # until the request is cancelled
        if spec.get("fail"):
            self.script.write_text(json.dumps(script | {"state": spec["fail"]}))
            raise DaemonError(spec["fail"], f"the k3 audit daemon at {self.options.endpoint} stopped answering")
        if "refusal" in spec:
            yield {"kind": "error", "code": "too_long", "message": spec["refusal"]}
            return
        for finding in spec.get("findings", []):
            yield {"kind": "finding", "finding": finding}
        yield {"kind": "done", "stats": {"finish_reason": spec.get("cut_short", "stop"), "generated_tokens": 1}}


@dataclass(frozen=True)
class FakeScript:
    """A script file for the fake, and the command that serves a language server answering from it."""

    path: Path

    def write(self, script: dict) -> None:
        self.path.write_text(json.dumps(script))

    @property
    def server(self) -> list[str]:
        return [sys.executable, "-m", "tests.support.fake_daemon", str(self.path)]

    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(REPO)}  # `tests` is not installed: found from the repository


if __name__ == "__main__":
    from k3lsp.lsp.server import serve_stdio

    serve_stdio(FakeDaemon.factory(Path(sys.argv[1])))
