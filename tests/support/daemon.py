"""A real `k3-backend serve` process for tests, and a raw DEALER to talk to it.

`serving(model, script=..., args=...)` starts the daemon as its own process on a private ipc socket (in a
fresh 0700 directory, like the default one), forked from the worker's zygote (tests/support/zygote.py: the
daemon's imports are done once per worker), waits (bounded) for its ready line, yields a `Daemon` with the
endpoint, and stops the process by PID at the end (SIGTERM, then SIGKILL if it does not exit). LSP, CLI and
editor tests reuse it with their own scripts; `bind=` gives another endpoint (plain tcp needs --insecure).

`module_daemon(script, args)` makes the common fixture of that: one scripted daemon for a test module.

`Wire` is a plain zmq.asyncio DEALER speaking k3lsp.wire.protocol: tests see exactly the frames on the wire. Many
coroutines may wait on one Wire for different requests: one of them at a time reads the socket and keeps
what it reads for the others, who look there before they read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from backend import launch
from backend.launch import stop
from k3lsp.wire import protocol
from tests.support import zygote

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Daemon:
    endpoint: str
    proc: subprocess.Popen | zygote.Forked
    log: Path  # the daemon's stderr
    traces: Path  # its --trace-file: one JSON line per finished conversation

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def sessions(self, unit: str) -> list[dict]:
        """The finished conversations about ``unit``, oldest first (``serve --trace-file``)."""
        lines = self.traces.read_text().splitlines() if self.traces.exists() else []
        return [s for s in map(json.loads, lines) if s["id"] == unit]


@contextlib.contextmanager
def serving(
    model: str | Path,
    *,
    script: list | None = None,
    args: list[str] = (),
    ready_timeout: float = 180.0,
    cwd: Path = REPO,
    bind: str | None = None,
    trust: bool = True,
    until: str = launch.READY,
    store: Path | bool = False,
) -> Iterator[Daemon]:
    """Run `k3-backend serve --model MODEL --bind ENDPOINT --trace-file T [--script FILE] *args` for the block,
    in ``cwd``, with `--trust-remote-code` (the tiny checkpoint's tokenizer class is this repository's code)
    unless `trust` is false; from its ready line on, or from its listening line (still loading) when ``until``
    is launch.LISTENING. ``store``: the daemon's result store file, True for a fresh one of its own, False for
    none (the tests' default)."""
    with tempfile.TemporaryDirectory(prefix="k3d-") as tmp:
        traces = Path(tmp) / "traces.jsonl"
        cmd = [
            "--model",
            str(model),
            "--bind",
            bind or f"ipc://{tmp}/daemon.sock",
            "--trace-file",
            str(traces),
            *(["--trust-remote-code"] if trust else []),
        ]
        cmd += ["--store", str(Path(tmp) / "store.sqlite3" if store is True else store)] if store else ["--no-store"]
        if script is not None:
            path = Path(tmp) / "script.json"
            path.write_text(json.dumps(script))
            cmd += ["--script", str(path)]
        log = Path(tmp) / "daemon.log"
        with open(log, "wb") as err:
            try:
                proc = (zygote.spawn if zygote.USABLE else launch.spawn)([*cmd, *args], stderr=err, cwd=cwd)
                endpoint = launch.ready(proc, ready_timeout, until)
            except launch.LaunchError as exc:
                raise RuntimeError(f"{exc}:\n{log.read_text()[-3000:]}") from exc
        try:
            yield Daemon(endpoint, proc, log, traces)
        finally:
            stop(proc)


def module_daemon(script: Callable[[], list[dict]], args: Sequence[str] = ()) -> Callable:
    """A module-scoped ``daemon`` fixture (assign it to ``daemon`` in the module): `serving` the tiny checkpoint
    with ``script()`` and ``args``. The script is built when the daemon starts, not at import: typed tool calls
    are written with the checkpoint's tokenizer code (transformers), which the tiers without the backend lack."""
    import pytest  # here: bench/ scripts use this module without the dev extra

    @pytest.fixture(scope="module")
    def daemon(tiny_model) -> Iterator[Daemon]:
        with serving(tiny_model, script=script(), args=list(args)) as d:
            yield d

    return daemon


class Wire:
    """One DEALER connected to the daemon; every receive is bounded."""

    def __init__(
        self,
        endpoint: str,
        timeout: float = 60.0,
        curve: tuple[bytes, bytes, bytes] | None = None,
        routing_id: bytes | None = None,
    ):
        """``curve`` = (server public, client public, client secret) z85 keys for a CurveZMQ daemon;
        ``routing_id`` claims an identity on the daemon's ROUTER (tests of handover)."""
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if routing_id is not None:
            self.sock.setsockopt(zmq.ROUTING_ID, routing_id)
        if curve is not None:
            self.sock.curve_serverkey, self.sock.curve_publickey, self.sock.curve_secretkey = curve
        self.sock.connect(endpoint)
        self.timeout = timeout
        self._held: list[dict] = []  # messages received while waiting for another request's
        self._reading = asyncio.Lock()  # one reader at a time: a frame read for another waiter is held for it

    async def __aenter__(self) -> Wire:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()

    async def send(self, kind: str, msg_id: str, **fields: Any) -> None:
        await self.sock.send(protocol.encode(protocol.make(kind, msg_id, **fields)))

    async def send_raw(self, *frames: bytes) -> None:
        await self.sock.send_multipart(list(frames))

    async def recv(self, timeout: float | None = None) -> dict:
        """The next message, decoded and validated as daemon -> client."""
        if self._held:
            return self._held.pop(0)
        frame = await asyncio.wait_for(self.sock.recv(), timeout or self.timeout)
        return protocol.decode(frame, "to_client")

    async def next_for(self, msg_id: str, timeout: float | None = None) -> dict:
        """The next message about request ``msg_id``; others are kept for their own callers.

        Safe from many coroutines at once: a message one of them reads for another is held, and the other
        finds it as soon as it takes its turn at the socket (the lock is fair, so that is the next turn).
        """
        async with asyncio.timeout(timeout or self.timeout):
            while True:
                for i, msg in enumerate(self._held):
                    if msg["id"] == msg_id:
                        return self._held.pop(i)
                async with self._reading:
                    if any(msg["id"] == msg_id for msg in self._held):
                        continue  # delivered while we waited for the socket
                    msg = protocol.decode(await self.sock.recv(), "to_client")
                if msg["id"] == msg_id:
                    return msg
                self._held.append(msg)

    async def until(self, msg_id: str, kind: str, timeout: float | None = None) -> dict:
        """Skip ``progress`` messages of request ``msg_id`` up to the next one of ``kind``."""
        for _ in range(1000):
            msg = await self.next_for(msg_id, timeout)
            if msg["kind"] == kind:
                return msg
            if msg["kind"] != "progress":
                raise AssertionError(f"expected {kind} for {msg_id}, got {msg}")
        raise AssertionError(f"no {kind} for {msg_id} after 1000 progress messages")

    async def ask(self, kind: str, msg_id: str, **fields: Any) -> dict:
        """Send a message that gets exactly one reply (hello, ping, status) and return the reply."""
        await self.send(kind, msg_id, **fields)
        return await self.next_for(msg_id)

    async def request(self, kind: str, msg_id: str, tools: dict[str, Any] | None = None, **fields: Any) -> list[dict]:
        """Send a request and collect its messages up to and including the terminal one.

        ``tools`` maps a tool name to the (ok, result) the test answers each tool_request with.
        """
        await self.send(kind, msg_id, **fields)
        return await self.finish(msg_id, tools)

    async def finish(self, msg_id: str, tools: dict[str, Any] | None = None) -> list[dict]:
        out = []
        for _ in range(10_000):
            msg = await self.next_for(msg_id)
            out.append(msg)
            if msg["kind"] in protocol.TERMINAL_KINDS:
                return out
            if msg["kind"] == "tool_request" and tools is not None and msg["tool"] in tools:
                ok, result = tools[msg["tool"]]
                await self.send("tool_result", msg_id, call=msg["call"], ok=ok, result=result)
        raise AssertionError(f"request {msg_id} sent 10000 messages without ending")


def nowhere(directory: Path) -> str:
    """An endpoint where no daemon listens: a socket in a private directory, like the default one but empty."""
    return f"ipc://{directory}/nowhere/daemon.sock"


def audit_fields(
    unit: str,
    *,
    code: str = "int f(int n)\n{\n\treturn n;\n}\n",
    path: str = "src/f.c",
    context: str = "#include <stddef.h>",
    **extra: Any,
) -> dict:
    """The fields of an `audit` message for a unit (scripts match on the unit name)."""
    return {"path": path, "unit": unit, "code": code, "context": context, **extra}
