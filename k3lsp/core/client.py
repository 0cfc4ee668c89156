"""The editor side's connection to one audit daemon: an asyncio DEALER with multiplexed, cancellable requests.

One :class:`DaemonClient` per daemon (a DEALER connected to two daemons would round-robin a request and
its cancel to different machines). A reader task routes every incoming message by its request id to
that request's queue, so many audits stream at once over one socket. Liveness is checked with the
application ``ping`` (ZMTP heartbeats only prove that libzmq is alive, not the daemon's event loop);
when the daemon goes away, open requests fail with :class:`DaemonError` within the liveness timeout
instead of hanging, and ZeroMQ reconnects by itself, so the next request works as soon as the daemon
is back. A daemon that answers pings but no longer has a request open (it restarted within the liveness
timeout, or the request's end was lost on the way) says so in its ``pong``: a request missing from two pongs
in a row fails the same way. So every request ends: with its terminal message, or with an error of this side.

Nothing is sent to a daemon whose identity is not established first (``daemon_identity``): with keys,
CurveZMQ proves the daemon holds the secret half of the configured server key; on an ``ipc://`` socket,
its directory must be this user's alone (k3lsp/wire/local.py); a plain tcp endpoint proves nothing and is
used only with ``insecure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from k3lsp import __version__
from k3lsp.wire import keys, local, protocol
from k3lsp.wire.protocol import CodedError, ErrorCode

log = logging.getLogger(__name__)

RECONNECT_MAX_MS = 1000  # the longest pause between reconnect attempts to a daemon that went away


ENV_ENDPOINT = "K3LSP_ENDPOINT"
ENDPOINT_FORMS = "ipc:///path/daemon.sock or tcp://HOST:PORT"


def default_endpoint() -> str:
    """The endpoint every k3lsp front end uses when none is configured: K3LSP_ENDPOINT, else the private
    ipc socket of this user's daemon (``local.default_endpoint``)."""
    return os.environ.get(ENV_ENDPOINT) or local.default_endpoint()


def endpoint_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` is no ZeroMQ endpoint, naming K3LSP_ENDPOINT when the value came from there; None when it
    is one. (Said before anything else: a value that is neither ipc nor tcp is not "plain tcp".)"""
    if endpoint.startswith(("ipc://", "tcp://")):
        return None
    if endpoint == os.environ.get(ENV_ENDPOINT):
        return (
            f"{ENV_ENDPOINT}={endpoint!r} is not a ZeroMQ endpoint: set it to one such as {ENDPOINT_FORMS}, "
            "or unset it to use this user's daemon socket"
        )
    return f"{endpoint!r} is not a ZeroMQ endpoint such as {ENDPOINT_FORMS}"


def unreachable(endpoint: str, timeout: float) -> str:
    """Nothing took a message: on an ipc socket that means no daemon runs there, so say how to start one."""
    said = f"the audit daemon at {endpoint} is not reachable (nothing took a message within {timeout:g} s)"
    if not endpoint.startswith("ipc://"):
        return said
    bind = "" if endpoint == local.default_endpoint() else f" --bind {endpoint}"
    return f"{said}: is the daemon running? start it with `k3-backend serve --model CHECKPOINT{bind}`"


def _retrieved(future: asyncio.Future) -> None:
    """A send nobody awaits: its failure (nothing connected) is the expected outcome, not a lost error."""
    if not future.cancelled():
        future.exception()


class DaemonError(CodedError):
    """The daemon could not serve a request. ``code`` says why, for programs: one of :class:`ErrorCode` (the one
    list of codes, each with its kind; docs/protocol.md explains them), either the client's own, for what
    happened on this side, or the daemon's ``error`` code. The message says it for people."""


@dataclass
class ClientOptions:
    endpoint: str = ""
    connect_timeout: float = 5.0  # hello -> welcome; a daemon that is up answers in milliseconds
    liveness_interval: float = 2.0  # ping period while requests are open
    liveness_timeout: float = 6.0  # no message at all for this long while requests are open -> down
    client_name: str = "k3lsp"
    server_key: Path | None = None  # the daemon's public key file: turns CurveZMQ on
    client_key: Path | None = None  # this client's secret key file (its public half must be in the daemon's allow-list)
    insecure: bool = False  # allow a plain tcp endpoint, where nothing proves who the daemon is

    def __post_init__(self) -> None:
        self.endpoint = self.endpoint or default_endpoint()


ToolHandler = Callable[[dict], Awaitable[tuple[bool, str]]]


class DaemonClient:
    """A DEALER to one daemon; safe to use from many tasks of one event loop."""

    def __init__(self, options: ClientOptions | None = None, context: zmq.asyncio.Context | None = None):
        self.options = options or ClientOptions()
        self._ctx = context or zmq.asyncio.Context.instance()
        self._sock: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task | None = None
        self._watchdog: asyncio.Task | None = None
        self._queues: dict[str, asyncio.Queue[dict]] = {}
        self._sent: set[str] = set()  # streaming requests the daemon has been sent and not yet ended
        self._missing: set[str] = set()  # ... of those, the ones the last pong did not list as open
        self._ids = itertools.count(1)
        self._prefix = os.urandom(4).hex()
        self._last_heard = 0.0
        self._handshake_error: DaemonError | None = None
        self._monitor: asyncio.Task | None = None
        self.welcome: dict | None = None
        self._curve: tuple[bytes, bytes, bytes] | None = None  # (server public, our public, our secret)
        # Who the daemon is, established before anything is sent: "curve:<server public key, z85>",
        # "ipc:<socket path>" (a socket only this user can create) or "insecure:<endpoint>" (nothing proven).
        self.daemon_identity: str | None = None

    # --- connection --------------------------------------------------------------------------------------

    def _open(self) -> zmq.asyncio.Socket:
        self.identify()  # nothing is sent to a daemon whose identity is not established
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)  # unsent source code should not linger after close
        sock.setsockopt(zmq.IMMEDIATE, 1)  # queue only to completed connections: a dead daemon is seen, not buffered
        sock.setsockopt(zmq.RECONNECT_IVL, 250)
        # Reconnect attempts stay closer together than a hello's wait (3-5 s), so the first request after the
        # daemon comes back finds a connection instead of timing out behind the backoff.
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
        sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 4000)
        sock.setsockopt(zmq.HEARTBEAT_TTL, 4000)
        if self._curve is not None:
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self._curve
        self._monitor = asyncio.create_task(
            self._watch_handshakes(
                sock.get_monitor_socket(addr=f"inproc://k3lsp-monitor-{id(self)}-{os.urandom(4).hex()}"),
            ),
            name="k3lsp-monitor",
        )
        sock.connect(self.options.endpoint)
        return sock

    def identify(self) -> str:
        """Who the daemon must be (``daemon_identity``), from the settings alone: nothing is sent, and this works
        while the daemon is down (the editor files and finds results under it). Raises DaemonError with code
        ``keys`` or ``insecure`` when the settings name no daemon that can be trusted."""
        if self.daemon_identity is None:
            self.daemon_identity = self._curve_identity() or self._check_plain()
        return self.daemon_identity

    def _curve_identity(self) -> str | None:
        """Load the CurveZMQ keys when they are set; returns the daemon identity the handshake will prove."""
        opts = self.options
        if not (opts.server_key or opts.client_key):
            return None
        if not (opts.server_key and opts.client_key):
            raise DaemonError(
                ErrorCode.KEYS,
                "CurveZMQ needs both serverKey (the daemon's public key) and clientKey (this client's secret key file)",
            )
        try:
            server = keys.load_public(opts.server_key)
            self._curve = (server, *keys.load_secret(opts.client_key))
        except keys.KeyFileError as exc:
            raise DaemonError(ErrorCode.KEYS, str(exc)) from exc
        return f"curve:{server.decode()}"

    def _check_plain(self) -> str:
        """The daemon identity of a plain endpoint, or DaemonError('insecure') when there is none to trust."""
        endpoint = self.options.endpoint
        problem = endpoint_problem(endpoint)
        if problem is not None:
            raise DaemonError(ErrorCode.INSECURE, problem)
        if endpoint.startswith("ipc://"):
            try:
                return f"ipc:{local.private_socket(endpoint)}"
            except local.LocalSocketError as exc:
                raise DaemonError(ErrorCode.INSECURE, f"not connecting to {exc}") from None
        if self.options.insecure:
            return f"insecure:{endpoint}"
        raise DaemonError(
            ErrorCode.INSECURE,
            f"not sending code to {endpoint}: on plain tcp any user of this machine could be the one answering; "
            "use the daemon's default ipc socket, set serverKey/clientKey, or set insecure if you trust every "
            "user of this machine and the network",
        )

    async def _watch_handshakes(self, monitor: zmq.asyncio.Socket) -> None:
        """Turn libzmq's silent refusals into reasons: a refused client otherwise just waits forever."""
        endpoint = self.options.endpoint
        reasons = {
            zmq.EVENT_HANDSHAKE_FAILED_AUTH: DaemonError(
                ErrorCode.UNAUTHORIZED,
                f"the audit daemon at {endpoint} refused this client's key: add the public half "
                f"of {self.options.client_key} to the daemon's authorized keys",
            ),
            # no detail: a Curve daemon could not read our hello (another server key); a plain client has no key
            # to be wrong, the daemon closed the connection before libzmq read the mechanism it names (seen under
            # load from a Curve daemon)
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: DaemonError(
                ErrorCode.SECURITY_MISMATCH,
                f"the audit daemon at {endpoint} closed the connection during the handshake: it most likely uses "
                "CurveZMQ keys (serverKey/clientKey) and this client does not",
            )
            if self._curve is None
            else DaemonError(
                ErrorCode.SERVER_KEY,
                f"the handshake with {endpoint} failed: the configured server key does not match the daemon's key",
            ),
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: DaemonError(
                ErrorCode.SECURITY_MISMATCH,
                f"the audit daemon at {endpoint} and this client disagree on encryption: "
                "one uses CurveZMQ keys (serverKey/clientKey) and the other does not",
            ),
        }
        try:
            while True:
                event = parse_monitor_message(await monitor.recv_multipart())["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._handshake_error = None
                elif event in reasons:
                    self._handshake_error = reasons[event]
                    self._fail_all(reasons[event].code, str(reasons[event]))
        except (asyncio.CancelledError, zmq.ZMQError):
            pass
        finally:
            monitor.close(linger=0)

    async def connect(self) -> dict:
        """Open the socket and say hello; returns the daemon's ``welcome`` or raises DaemonError."""
        if self._sock is None:
            self._sock = self._open()
            self._reader = asyncio.create_task(self._read_loop(), name="k3lsp-client-reader")
            self._watchdog = asyncio.create_task(self._liveness_loop(), name="k3lsp-client-liveness")
        reply = await self._one(
            "hello", self.options.connect_timeout, client=self.options.client_name, version=__version__
        )
        if reply["kind"] != "welcome":
            raise DaemonError(
                reply.get("code", ErrorCode.PROTOCOL), reply.get("message", f"unexpected {reply['kind']}")
            )
        if reply["protocol"] != protocol.VERSION:
            raise DaemonError(
                ErrorCode.VERSION,
                f"the daemon speaks protocol {reply['protocol']}, this client "
                f"{protocol.VERSION}: upgrade the older side",
            )
        self.welcome = reply
        return reply

    async def close(self) -> None:
        """Stop the tasks and close the socket; never raises: a task that died is logged, not re-raised here.

        The monitor is disabled before its reader goes: libzmq's I/O thread sends socket events to the monitor
        with a blocking send, and with nobody reading it blocks for ever, and every later connection of the
        process's context with it (seen: the next connect never completes).
        """
        if self._sock is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
        for task in (self._reader, self._watchdog, self._monitor):
            if task:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception:
                    log.exception("the client's %s task had failed", task.get_name())
        self._fail_all(ErrorCode.DOWN, "client closed")
        if self._sock is not None:
            self._sock.close(linger=0)
        self._sock = self._reader = self._watchdog = self._monitor = None

    async def __aenter__(self) -> DaemonClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- sending and receiving ---------------------------------------------------------------------------

    def new_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    async def send(self, kind: str, msg_id: str, **fields: Any) -> None:
        """Send one message; DaemonError('unreachable') if the daemon takes nothing within the connect timeout.

        With ``IMMEDIATE`` set, libzmq queues a message only to a completed connection, so a daemon that is not
        there makes the socket unwritable: wait (bounded) until it can take the message, then hand it over
        without blocking. (A send that is cancelled on a timeout instead leaves pyzmq's own future behind,
        which fails later with nobody to see it.)"""
        if self._sock is None:
            raise DaemonError(ErrorCode.DOWN, "not connected")
        frame = protocol.encode(protocol.make(kind, msg_id, **fields))
        timeout = self.options.connect_timeout
        try:
            writable = await self._sock.poll(int(timeout * 1000), zmq.POLLOUT)
            if writable:
                await self._sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:  # the connection went between the poll and the send
            writable = 0
        if not writable:
            raise self._handshake_error or DaemonError(
                ErrorCode.UNREACHABLE, unreachable(self.options.endpoint, timeout)
            )

    def send_nowait(self, kind: str, msg_id: str, **fields: Any) -> bool:
        """Send a message nobody waits on (a ``cancel``) if the socket takes it at once; False when it does not
        (no connection: the daemon is gone, and with it the request to cancel)."""
        if self._sock is None:
            return False
        try:
            sent = self._sock.send(protocol.encode(protocol.make(kind, msg_id, **fields)), zmq.NOBLOCK)
        except zmq.ZMQError:  # a closed socket
            return False
        sent.add_done_callback(_retrieved)  # zmq.Again, when nothing is connected, fails the future: seen here
        return not (sent.done() and not sent.cancelled() and sent.exception() is not None)

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            frame = await self._sock.recv()
            self._last_heard = loop.time()
            try:
                message = protocol.decode(frame, "to_client")
            except protocol.ProtocolError as exc:
                log.warning("dropped a malformed frame from the daemon: %s", exc)
                continue
            queue = self._queues.get(message["id"])
            if queue is not None:
                queue.put_nowait(message)

    async def _liveness_loop(self) -> None:
        """While requests are open, ping; if nothing at all comes back in time, fail them (the daemon is gone)."""
        loop = asyncio.get_running_loop()
        opts = self.options
        while True:
            await asyncio.sleep(opts.liveness_interval)
            if not self._busy():
                continue
            asked = set(self._sent)  # sent before the ping: the daemon has read them when it answers it
            with contextlib.suppress(DaemonError):
                self._end_forgotten(await self._one("ping", opts.liveness_interval, prefix="ping-"), asked)
            if loop.time() - self._last_heard > opts.liveness_timeout:
                self._fail_all(ErrorCode.DOWN, f"the audit daemon at {opts.endpoint} stopped answering")

    def _end_forgotten(self, pong: dict, asked: set[str]) -> None:
        """Fail the requests that two pongs in a row did not list as open: their end will never come. A reply
        without ``open`` (an older daemon, an error) checks nothing."""
        if "open" not in pong:
            self._missing = set()
            return
        missing = (asked - set(pong["open"])) & self._sent
        lost, self._missing = missing & self._missing, missing - self._missing
        for msg_id in lost:
            message = (
                f"the audit daemon at {self.options.endpoint} no longer has request {msg_id} open "
                "(it restarted, or the request's answer was lost on the way)"
            )
            self._queues[msg_id].put_nowait(protocol.error(msg_id, ErrorCode.DOWN, message) | {"local": True})

    def _busy(self) -> bool:
        return any(not k.startswith("ping-") for k in self._queues)

    def _request_queue(self, msg_id: str) -> asyncio.Queue[dict]:
        """The queue of a new request. The silence the liveness check measures starts now if nothing was open:
        what the daemon said (or did not) before this request cannot fail it."""
        if not self._busy() and not msg_id.startswith("ping-"):
            self._last_heard = asyncio.get_running_loop().time()
        queue = self._queues[msg_id] = asyncio.Queue()
        return queue

    def _fail_all(self, code: str, message: str) -> None:
        for msg_id, queue in list(self._queues.items()):
            queue.put_nowait(protocol.error(msg_id, code, message) | {"local": True})

    async def _one(self, kind: str, timeout: float, prefix: str = "", **fields: Any) -> dict:
        """A request with exactly one reply (hello, ping, status)."""
        msg_id = prefix + self.new_id()
        queue = self._request_queue(msg_id)
        try:
            await self.send(kind, msg_id, **fields)
            return await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError as exc:
            raise self._handshake_error or DaemonError(
                ErrorCode.UNREACHABLE,
                f"the audit daemon at {self.options.endpoint} did not answer within {timeout:g} s",
            ) from exc
        finally:
            self._queues.pop(msg_id, None)

    async def ping(self, timeout: float = 5.0) -> float:
        """Round-trip time of an application ping, in seconds."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        reply = await self._one("ping", timeout)
        if reply["kind"] != "pong":
            raise DaemonError(reply.get("code", ErrorCode.PROTOCOL), reply.get("message", "no pong"))
        return loop.time() - start

    async def status(self, timeout: float = 5.0) -> dict:
        reply = await self._one("status", timeout)
        if reply["kind"] != "status":
            raise DaemonError(reply.get("code", ErrorCode.PROTOCOL), reply.get("message", "no status"))
        return reply["status"]

    # --- streaming requests ------------------------------------------------------------------------------

    async def stream(self, kind: str, fields: dict, *, tools: ToolHandler | None = None) -> AsyncIterator[dict]:
        """Send a request (``audit``/``explain``) and yield its messages up to and including the terminal one.

        ``tool_request`` messages are answered with ``tools`` (or refused when none is given) and also yielded.
        Leaving the loop early (break, task cancellation) cancels the request on the daemon.
        """
        msg_id = self.new_id()
        queue = self._request_queue(msg_id)
        finished = False
        try:
            await self.send(kind, msg_id, **fields)
            self._sent.add(msg_id)
            while True:
                message = await queue.get()
                if message["kind"] == "tool_request":
                    ok, text = await tools(message) if tools else (False, "no tools are available")
                    await self.send("tool_result", msg_id, call=message["call"], ok=ok, result=text)
                finished = message["kind"] in protocol.TERMINAL_KINDS
                yield message
                if finished:
                    return
        finally:
            self._queues.pop(msg_id, None)
            self._sent.discard(msg_id)
            if not finished:  # left early: the daemon stops the work (never awaited, so a cancel cannot hang)
                self.send_nowait("cancel", msg_id)
