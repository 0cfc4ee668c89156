"""One daemon as the editor side knows it: the connection's state, its welcome, and what its results go under.

The state (:class:`~k3lsp.wire.protocol.ConnState`) changes in this module only, for one of these reasons:

- a hello (:meth:`Connection.ensure`): ``connecting``, then ``connected`` or ``loading``, or the state its
  failure's code names (``down``, ``unauthorized``);
- a request that failed for a reason that concerns the whole daemon (:meth:`Connection.failed`): the client
  gave up sending (nothing took the message within the connect timeout: no socket file, nobody listening), the
  daemon stopped answering mid-request (the client's liveness check), it is shutting down, its pair failed,
  it refused our key;
- new settings (:meth:`Connection.reset`): ``disconnected``.

Every change is reported through ``on_change`` (the pool sums them up for the status views and the messages a
person sees). A failed daemon is asked again on the next trigger (``Pool.reach``); ZeroMQ reconnects the
socket by itself, so the first hello after it returns succeeds.

What its results are filed under (:attr:`Connection.result_key`) is known before the first hello when the
daemon answered before: the cache remembers what each daemon identity served (``ResultCache.recall``), so
cached findings are shown at once when a file opens, with the daemon down or still starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from k3lsp.core import tasks
from k3lsp.core.client import ClientOptions, DaemonClient, DaemonError, ToolHandler
from k3lsp.core.options import Options
from k3lsp.core.replies import LoadProgress, Welcome, loading_of
from k3lsp.wire import sanitize
from k3lsp.wire.address import ResultKey
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import CodedError, ConnState, ErrorCode, state_for

log = logging.getLogger(__name__)

LOAD_POLL = 1.0  # seconds between status questions to a daemon that is loading its model
CONNECT_TIMEOUT = 3.0  # seconds for a hello: a daemon that is up answers in milliseconds


class DaemonUnavailable(CodedError):
    """The daemon cannot be used right now (``code``: a transient or set-up :class:`ErrorCode`)."""


class Transport(Protocol):
    """What a connection needs of the socket to its daemon: :class:`~k3lsp.core.client.DaemonClient`, or the
    fake daemon of the logic tests (tests/support/fake_daemon.py)."""

    options: ClientOptions
    daemon_identity: str | None

    def identify(self) -> str: ...

    async def connect(self) -> dict: ...

    async def close(self) -> None: ...

    def stream(self, kind: str, fields: dict, *, tools: ToolHandler | None = None) -> AsyncIterator[dict]: ...

    async def status(self, timeout: float = 5.0) -> dict: ...


TransportFactory = Callable[[ClientOptions], Transport]


@dataclass(frozen=True)
class DaemonState:
    """The ``k3lsp/status`` notification's payload (docs/lsp.md)."""

    state: ConnState
    queued: int
    running: int
    message: str
    percent: int | None = None  # with state loading: how much of the model is read (0..100), when the daemon says


def client_options(options: Options, name: str) -> ClientOptions:
    return ClientOptions(
        endpoint=options.endpoint,
        connect_timeout=CONNECT_TIMEOUT,
        client_name=name,
        server_key=Path(options.server_key).expanduser() if options.server_key else None,
        client_key=Path(options.client_key).expanduser() if options.client_key else None,
        insecure=options.insecure,
    )


def not_connected(endpoint: str) -> str:
    """Why nothing is known yet: the daemon is first contacted when a C file is opened or audited."""
    return f"not connected yet to {endpoint}: it is contacted when a C file is opened or audited"


class Connection:
    """One daemon of the ``endpoint`` setting; used from one event loop."""

    def __init__(
        self,
        options: ClientOptions,
        cache: ResultCache,
        transport: TransportFactory = DaemonClient,
        on_change: Callable[[], None] = lambda: None,
    ):
        self.options = options
        self.endpoint = options.endpoint
        self.cache = cache
        self.welcome: Welcome | None = None  # the last welcome: the result key survives an outage
        self.running = 0  # requests in flight (the pool's bookkeeping)
        self._transport_factory = transport
        self._transport = transport(options)
        self._on_change = on_change
        self._state, self._message, self._percent = ConnState.DISCONNECTED, not_connected(self.endpoint), None
        self._hello: asyncio.Task | None = None
        self._load_watch: asyncio.Task | None = None
        self._key: ResultKey | None = None  # from the welcome, else remembered for this identity
        self._recall()

    # --- state -------------------------------------------------------------------------------------------

    @property
    def state(self) -> ConnState:
        return self._state

    def status_line(self, queued: int = 0) -> DaemonState:
        return DaemonState(self._state, queued, self.running, self._message, self._percent)

    def _set(self, state: ConnState, message: str, percent: int | None = None) -> None:
        if state is not self._state:
            log.info("%s: %s (%s)", self.endpoint, state, sanitize.line(message))
        self._state, self._message, self._percent = state, sanitize.line(message), percent  # it quotes the daemon
        self._on_change()

    @property
    def result_key(self) -> ResultKey | None:
        """What this daemon's results are filed under; None before anything is known of it, or when it names no
        checkpoint (its results are shown, never cached)."""
        return self._key

    def _recall(self) -> None:
        """The key of the last welcome this identity gave, before any hello (none for untrusted settings)."""
        try:
            identity = self._transport.identify()
        except DaemonError:
            return  # the first hello says why, as the state
        served = self.cache.recall(identity)
        if served is not None:
            self._key = ResultKey(*served, identity)

    async def reset(self, options: ClientOptions) -> None:
        """New settings for this daemon: a new socket, and nothing known of it until it answers."""
        await self.close()
        self.options, self.endpoint = options, options.endpoint
        self._transport = self._transport_factory(options)
        self.welcome, self._key = None, None
        self._recall()
        self._set(ConnState.DISCONNECTED, not_connected(self.endpoint))

    async def close(self) -> None:
        await tasks.cancel(self._hello, self._load_watch)
        self._hello = self._load_watch = None
        await self._transport.close()

    # --- hello -------------------------------------------------------------------------------------------

    async def ensure(self, fresh: bool = False) -> Welcome:
        """The daemon's welcome, saying hello if it has not answered since its last failure; one hello at a time
        however many wait. Raises DaemonUnavailable (the state says why).

        ``fresh``: a hello already on its way when this was asked may have been sent before the daemon came back
        (it waits out the connect timeout for a socket that only now listens): when it fails, one more hello is
        said, so the trigger that asks (a save after a restart) finds the daemon that is there now."""
        if self._state.usable and self.welcome is not None:
            return self.welcome
        if self._hello is None:
            return await asyncio.shield(self._start_hello())
        try:
            return await asyncio.shield(self._hello)
        except DaemonUnavailable:
            if not fresh:
                raise
        return await self.ensure()

    def _start_hello(self) -> asyncio.Task:
        self._hello = tasks.background(self._say_hello(), f"the hello to {self.endpoint}", DaemonUnavailable)
        return self._hello

    async def _say_hello(self) -> Welcome:
        self._set(ConnState.CONNECTING, f"connecting to {self.endpoint}")
        try:
            reply = await self._transport.connect()
        except DaemonError as exc:
            raise self.failed(exc.code, str(exc)) from exc
        except Exception as exc:  # a fault of ours must not leave the state at "connecting" for ever
            log.exception("the hello to %s failed", self.endpoint)
            raise self.failed(ErrorCode.DOWN, f"the hello failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._hello = None
        self.welcome = welcome = Welcome.of(reply)
        identity = self._transport.daemon_identity
        self._key = ResultKey(welcome.fingerprint, welcome.prompt_version, identity) if identity else None
        if welcome.fingerprint and identity:
            self.cache.remember(identity, welcome.fingerprint, welcome.prompt_version)
        else:
            self._key = None  # no checkpoint named: shown, never cached
        if welcome.loading is not None:
            self._loading(welcome.loading)
        else:
            self._set(ConnState.CONNECTED, welcome.serving())
        return welcome

    def failed(self, code: str, message: str) -> DaemonUnavailable:
        """The daemon cannot serve us (``code`` concerns the whole daemon): the state its code names, and the
        error to raise. The welcome and result key are kept: cached results stay shown."""
        where = "" if self.endpoint in message else f" at {self.endpoint}"
        text = message if message.startswith("k3 audit backend") else f"k3 audit backend{where}: {message}"
        self._set(state_for(code), text)
        return DaemonUnavailable(code, sanitize.line(text))

    # --- a daemon that is loading its model --------------------------------------------------------------

    def _loading(self, progress: LoadProgress) -> None:
        """Show how far the daemon's load is, and keep asking until it serves (requests sent meanwhile wait
        on the daemon, which bounds the wait)."""
        self._set(ConnState.LOADING, progress.describe(), progress.percent)
        if self._load_watch is None or self._load_watch.done():
            self._load_watch = tasks.background(self._watch_load(), f"the load watch of {self.endpoint}")

    async def _watch_load(self) -> None:
        while self._state is ConnState.LOADING:
            await asyncio.sleep(LOAD_POLL)
            try:
                reply = await self._transport.status(self.options.connect_timeout)
            except DaemonError as exc:
                self.failed(exc.code, str(exc))
                return
            if self._state is not ConnState.LOADING:  # a request found the daemon gone meanwhile
                return
            progress = loading_of(reply)
            if progress is not None:
                self._set(ConnState.LOADING, progress.describe(), progress.percent)
                continue
            self._state = ConnState.DISCONNECTED  # loaded: a fresh hello, whose welcome describes the model served
            with contextlib.suppress(DaemonUnavailable):  # the state says it
                await self.ensure()
            return

    # --- requests ----------------------------------------------------------------------------------------

    def stream(self, kind: str, fields: dict, tools: ToolHandler) -> AsyncIterator[dict]:
        """One streaming request (``audit``, ``explain``) on this daemon's socket."""
        return self._transport.stream(kind, fields, tools=tools)

    async def daemon_status(self, timeout: float) -> dict:
        """The daemon's own status, sanitised; raises DaemonError."""
        return sanitize.data(await self._transport.status(timeout))
