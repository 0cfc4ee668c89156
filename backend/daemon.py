"""The daemon's socket: one ZeroMQ ROUTER (zmq.asyncio) speaking k3lsp/wire/protocol.py to any number of editors.

The event loop only moves messages: decoding, the job table, pings and status are answered here at once,
while generation runs in the scheduler's engine thread and each request's audit loop in its own task. So a
``ping`` or a ``cancel`` is never queued behind work, and one slow or vanished client never stalls another:

- every send is ``await send_multipart(..., flags=DONTWAIT)`` on a ROUTER_MANDATORY socket; ``zmq.Again``
  (the peer's high-water mark is full: a frozen client) or ``EHOSTUNREACH`` (the peer is gone) cancel that
  peer's jobs instead of blocking the socket (pyzmq takes its non-blocking path only while no send is
  waiting, so one blocking send to a stalled peer would queue every later send behind it);
- ZMTP heartbeats drop dead connections, and a socket monitor turns the disconnect into cancelled jobs.

Every connection passes the gate (backend/gate.py), which authenticates it and gives it its routing id and
its User-Id (the CURVE key, or on a plain socket the peer's uid or address). A message from a routing id the
gate did not give is refused. Jobs are keyed by (peer, request id). ``peer`` is the owner of a request
(``Daemon.peer_of``): the User-Id and the routing id. A ``cancel`` or ``tool_result`` is looked up under its
sender's own peer, so no client can touch another's request, even by reusing its id. Open requests are
counted per User-Id, so more connections do not raise a client's share. With CURVE every message's User-Id
is checked against the allow-list as it arrives, before each message a job streams out, and every
``--keys-reload-seconds`` (1 s) for the jobs that stream nothing: a key deleted from ``authorized/`` stops
being served within that time, with ``error`` code ``unauthorized``. Every request ends in exactly one ``done``,
``error`` or ``cancelled``: ``_run_job`` is the only code that finishes a job. A ``pong`` lists the sender's open
requests, so a client ends one this daemon no longer has (it restarted, or the terminal message was dropped for a
peer whose queue was full) instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from backend import auth
from backend.agent import Agent, AgentConfig, AgentError, AskTool, ChannelTally, Record, Send, seen
from backend.disconnects import FdRoutes
from backend.engine import EngineArgs
from backend.fairshare import FairShare
from backend.gate import Gate
from backend.loading import LoadProgress, ModelInfo, StillLoading, wait_loaded
from backend.prompts import PROMPT_VERSION
from backend.scheduler import Scheduler
from backend.settings import flag
from backend.store import ResultStore
from k3lsp import __version__
from k3lsp.wire import local, protocol
from k3lsp.wire.protocol import ErrorCode, Priority

log = logging.getLogger(__name__)

REQUEST_KINDS = frozenset(protocol.REQUEST_KINDS)
UNKNOWN_ID = "-"  # the id of an error answering a frame whose id could not be read
MIN_SWEEP_SECONDS = 0.05  # the revoked-key sweep's shortest period (keys_reload_seconds 0 re-reads on every check)


@dataclass
class DaemonConfig:
    """Socket and per-client limits (the serve flags)."""

    bind: str = field(
        default_factory=local.default_endpoint,
        metadata=flag(
            "ZeroMQ endpoint (default: a socket only this user can reach, %(default)s); a tcp:// endpoint needs keys "
            "or --insecure; tcp port 0 picks a free port"
        ),
    )
    max_open_per_client: int = field(default=16, metadata=flag("open requests per client"))
    # requests in the engine at once (serve --max-concurrency), shared fairly (backend/fairshare.py)
    slots: int = EngineArgs.max_concurrency
    interactive_reserve: int = EngineArgs.interactive_reserve  # of those, what background requests leave free
    tool_timeout: float = field(default=60.0, metadata=flag("seconds an editor has to answer a tool call"))
    sndhwm: int = 1000  # messages queued per peer before sends fail with Again (a frozen client)
    heartbeat_ivl_ms: int = 1000
    heartbeat_timeout_ms: int = 5000
    load_wait: float = field(
        default=600.0,
        metadata=flag("seconds a request that arrives while the model loads waits for it (error loading after)"),
    )
    security: auth.Security = field(default_factory=auth.Security)


class Stop(StrEnum):
    """Why the daemon stopped a job before it ended by itself; what its one terminal message is follows from it
    (:meth:`Daemon._terminal`)."""

    CLIENT = "client"  # the client cancelled it: `cancelled`
    VANISHED = "vanished"  # the client is gone: nothing is sent
    SHUTDOWN = "shutdown"  # the daemon stops: error `shutdown`
    UNAUTHORIZED = "unauthorized"  # the sender's key left the allow-list: error `unauthorized`
    FAILURE = "failure"  # serving cannot go on (the pair failed): the failure's own error
    REFUSED = "refused"  # refused after it was admitted (its error in `Job.refusal`)


@dataclass
class Job:
    """One open request. ``route`` is where its messages go; ``peer`` is who owns it."""

    peer: bytes
    route: bytes
    id: str
    kind: str
    user: str = ""  # the User-Id the gate gave the sender's connection (CURVE key, uid:N or addr:IP)
    task: asyncio.Task | None = None
    tools: dict[str, asyncio.Future] = field(default_factory=dict)  # call id -> future (ok, result)
    calls: itertools.count = field(default_factory=lambda: itertools.count(1))
    reason: Stop | None = None  # why the daemon stopped it; None while it runs or ends by itself
    refusal: tuple[str, str] = ("", "")  # with Stop.REFUSED: the (error code, message) it ends with

    def stop(self, reason: Stop, refusal: tuple[str, str] = ("", "")) -> None:
        if self.task is not None and not self.task.done() and not self.reason:
            self.reason, self.refusal = reason, refusal
            # Not task.cancel() directly: a task cancelled before its first step never enters its body, so
            # _run_job could not answer. The ready queue is FIFO, so the first step has run by then.
            asyncio.get_running_loop().call_soon(self.task.cancel)


class Daemon:
    """The ROUTER, the job table and the dispatch of client messages."""

    def __init__(
        self,
        scheduler: Scheduler | None,
        config: DaemonConfig,
        agent_config: AgentConfig,
        record: Record | None = None,
        store: ResultStore | None = None,
        *,
        loading: tuple[ModelInfo, LoadProgress] | None = None,
    ):
        """``scheduler`` None: the model is still loading (``loading`` says what it is and how far); requests
        wait for `attach` (bounded by ``load_wait``) while hello, ping and status are answered at once."""
        self.scheduler = scheduler
        self.info, self.progress = loading or (scheduler.engine if scheduler else None, LoadProgress())
        self._loaded = asyncio.Event()
        if scheduler is not None:
            self.attach(scheduler)
        self.config = config
        self.agent_config = agent_config
        self.record = record  # where finished conversations go (serve --trace-file), or None
        self.store = store  # complete audits shared by every authorised client (serve --store), or None
        self.fair = FairShare(config.slots, config.interactive_reserve)
        self._salt = os.urandom(16)  # status names other clients by a hash that says nothing outside this run
        self.tally = ChannelTally()  # generated tokens per channel, over every request
        self.endpoint = ""
        self._ctx = zmq.asyncio.Context()
        self._sock: zmq.asyncio.Socket | None = None
        self._gate: Gate | None = None
        self._jobs: dict[tuple[bytes, str], Job] = {}
        self._fd_routes = FdRoutes()  # which connection a disconnect event is about
        self._stopping = asyncio.Event()
        self._started = time.monotonic()
        self._counts = {"requests": 0, "bad_frames": 0, "send_failures": 0, "vanished": 0, "unauthorized": 0}
        # audits that read a prompt (not answered from the store) and the tokens they prefilled: what one unit's
        # whole prompt costs here, its cached prefix left out (a workspace audit's estimate: k3lsp.lsp.workscope)
        self._counts |= {"audits_prefilled": 0, "audit_prefilled_tokens": 0}
        self.failure: tuple[str, str] | None = None  # (error code, message) when serving cannot go on

    # --- life cycle ----------------------------------------------------------------------------------------

    def bind(self) -> str:
        """Create, secure and bind the ROUTER; returns the endpoint actually bound (port 0 resolved).

        Raises auth.InsecureBindError (or keys.KeyFileError) before binding when the set-up would expose
        source code: a plain tcp socket without ``insecure``, an ipc socket in a directory others may enter,
        or unusable key files (``auth.secure_router`` checks, whether or not the socket is secured).
        """
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, self.config.sndhwm)
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
        sock.setsockopt(zmq.HEARTBEAT_IVL, self.config.heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, self.config.heartbeat_timeout_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, self.config.heartbeat_timeout_ms)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 0)  # the default, stated: a reused routing id must not take results
        try:
            self._gate = auth.secure_router(sock, self.config.bind, self.config.security)
            sock.bind(self.config.bind)
        except BaseException:
            if self._gate is not None:
                self._gate.stop()
                self._gate = None
            sock.close(0)
            raise
        self._sock = sock
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return self.endpoint

    def attach(self, scheduler: Scheduler) -> None:
        """The model is loaded: serve with ``scheduler`` from now on, and let the waiting requests go on."""
        self.scheduler, self.info = scheduler, scheduler.engine
        self.progress.ready()
        self._loaded.set()

    def stop(self) -> None:
        """Ask ``serve`` to end (signal handlers call this)."""
        self._stopping.set()

    def fail(self, code: str, message: str) -> None:
        """Stop because the engine cannot serve any more (a rank of the pair failed): every open request
        ends with ``error`` ``code``, so no editor waits for a generation that will never come."""
        if self.failure is None:
            log.error("cannot serve any more (%s): %s", code, message)
            self.failure = (code, message)
        self._stopping.set()

    async def serve(self) -> None:
        """Serve until ``stop()``; then end every open request with ``error`` code ``shutdown`` and close."""
        if self._sock is None:
            self.bind()
        monitor = self._sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        tasks = [
            asyncio.create_task(self._receive()),
            asyncio.create_task(self._watch(monitor)),
            asyncio.create_task(self._sweep_revoked()),
        ]
        try:
            await self._stopping.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            jobs = list(self._jobs.values())
            for job in jobs:
                job.stop(Stop.FAILURE if self.failure else Stop.SHUTDOWN)
            await asyncio.gather(*(job.task for job in jobs if job.task), return_exceptions=True)
            if self.failure is None and self.scheduler is not None:  # after a failure the engine thread is gone
                await self.scheduler.close()
            self._sock.disable_monitor()
            monitor.close(0)
            self._sock.close(1000 if self.failure else 0)  # give the failure errors a moment to leave
            if self._gate is not None:
                self._gate.stop()
            self._ctx.term()

    # --- receiving -----------------------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            frames = await self._sock.recv_multipart(copy=False)
            try:
                await self._on_frames(frames)
            except Exception:  # nothing a client sends may end the loop
                log.exception("unexpected error handling a message")

    def user_of(self, frames: list[zmq.Frame]) -> str:
        """The User-Id the gate gave the sender's connection: its CURVE public key (z85), uid:N or addr:IP."""
        return frames[-1].get("User-Id") or ""

    def peer_of(self, frames: list[zmq.Frame]) -> bytes:
        """Who owns what the message starts: the User-Id and the routing id.

        The routing id keeps two connections of one key apart; the User-Id makes ownership follow what the
        gate authenticated, not anything the client put in the message.
        """
        return self.user_of(frames).encode() + b"/" + frames[0].bytes

    def _allowed(self, user: str) -> bool:
        return self._gate is None or self._gate.allows(user)

    async def _on_frames(self, frames: list[zmq.Frame]) -> None:
        route = frames[0].bytes
        user = self.user_of(frames)
        if self._gate is not None and not self._gate.names(route):  # kept an id of its own (a hand-made handshake)
            log.warning("refused a message from a connection that chose its own routing id %s", route.hex())
            await self._bad(route, UNKNOWN_ID, ErrorCode.BAD_REQUEST, "clients may not choose their routing id")
            return
        if not self._allowed(user):
            await self._unauthorized(route, user, frames[-1].bytes)
            return
        if len(frames) != 2:
            await self._bad(
                route, UNKNOWN_ID, ErrorCode.BAD_REQUEST, f"expected one frame per message, got {len(frames) - 1}"
            )
            return
        self._track_fd(frames[1], route)
        try:
            raw = protocol.unpack(frames[1].bytes)
        except protocol.ProtocolError as exc:
            await self._bad(route, UNKNOWN_ID, ErrorCode.BAD_REQUEST, str(exc))
            return
        msg_id = _readable_id(raw)
        try:
            msg = protocol.validate(raw, "to_daemon")
        except protocol.ProtocolError as exc:
            version = raw.get("v") if isinstance(raw, dict) else None
            other_version = isinstance(version, int) and version != protocol.VERSION
            code = ErrorCode.VERSION if other_version else ErrorCode.BAD_REQUEST
            await self._refuse(self.peer_of(frames), route, raw, msg_id, code, str(exc))
            return
        await self._dispatch(self.peer_of(frames), route, msg, user)

    async def _refuse(self, peer: bytes, route: bytes, raw: Any, msg_id: str, code: str, message: str) -> None:
        """Answer a malformed message so that every request still ends exactly once.

        A message naming one of the sender's open requests ends that request with this error (through its
        job: the only terminal message it gets). Otherwise the error carries the message's id, except for a
        ``cancel`` or ``tool_result``, which get no reply of their own: their error has the id ``-``.
        """
        job = self._jobs.get((peer, msg_id))
        if job is not None:
            self._counts["bad_frames"] += 1
            log.info("refused a message for open request %s (%s): %s", msg_id, code, message[:200])
            job.stop(Stop.REFUSED, (code, message))
            return
        await self._bad(route, _reply_id(raw), code, message)

    async def _unauthorized(self, route: bytes, user: str, frame: bytes) -> None:
        """A key removed from the allow-list while connected: end its requests and refuse the message."""
        self._counts["unauthorized"] += 1
        log.warning("refused a message from key %s: it is no longer in the authorized keys", user)
        ended = self._stop_route(route, Stop.UNAUTHORIZED)  # each ends with its own error unauthorized
        msg_id = _id_of(frame)
        if msg_id not in ended:
            await self._send(
                route, protocol.error(msg_id, ErrorCode.UNAUTHORIZED, "this client's key is not authorized")
            )

    async def _bad(self, route: bytes, msg_id: str, code: str, message: str) -> None:
        self._counts["bad_frames"] += 1
        log.info("refused a frame (%s): %s", code, message[:200])
        await self._send(route, protocol.error(msg_id, code, message))

    async def _dispatch(self, peer: bytes, route: bytes, msg: dict, user: str = "") -> None:
        kind, msg_id = msg["kind"], msg["id"]
        if kind == "ping":
            await self._send(route, protocol.make("pong", msg_id, **self._open_of(peer)))
        elif kind == "hello":
            await self._send(route, protocol.make("welcome", msg_id, **self.welcome()))
        elif kind == "status":
            await self._send(route, protocol.make("status", msg_id, status=self.status(user)))
        elif kind == "cancel":
            job = self._jobs.get((peer, msg_id))
            if job is not None:
                job.stop(Stop.CLIENT)
        elif kind == "tool_result":
            self._tool_result(peer, msg)
        elif kind in REQUEST_KINDS:
            await self._start(peer, route, msg, user)

    def _open_of(self, peer: bytes) -> dict:
        """The ``open`` field of a pong: the sender's open requests, which its client checks its own against (one
        the daemon no longer has would otherwise wait for ever); none beyond the protocol's bound."""
        ids = [msg_id for owner, msg_id in self._jobs if owner == peer]
        return {"open": ids} if len(ids) <= protocol.MAX_OPEN_LISTED else {}

    def _tool_result(self, peer: bytes, msg: dict) -> None:
        job = self._jobs.get((peer, msg["id"]))
        future = job.tools.get(msg["call"]) if job else None
        if future is None or future.done():
            log.info("tool_result for no waiting call (%s, call %s): ignored", msg["id"], msg["call"])
            return
        future.set_result((msg["ok"], msg["result"]))

    async def _start(self, peer: bytes, route: bytes, msg: dict, user: str) -> None:
        msg_id = msg["id"]
        if (peer, msg_id) in self._jobs:  # the id is ambiguous now: the open request ends with this error
            await self._refuse(peer, route, msg, msg_id, ErrorCode.DUPLICATE, f"request {msg_id!r} was already open")
            return
        # Counted per User-Id: opening more connections does not raise one client's share.
        open_now = sum(1 for job in self._jobs.values() if job.user == user)
        if open_now >= self.config.max_open_per_client:
            await self._send(
                route,
                protocol.error(
                    msg_id,
                    ErrorCode.BUSY,
                    f"{open_now} requests already open (limit {self.config.max_open_per_client})",
                ),
            )
            return
        if self._stopping.is_set():
            await self._send(route, protocol.error(msg_id, ErrorCode.SHUTDOWN, "the daemon is shutting down"))
            return
        job = Job(peer, route, msg_id, msg["kind"], user)
        self._jobs[(peer, msg_id)] = job
        self._counts["requests"] += 1
        job.task = asyncio.create_task(self._run_job(job, msg))

    # --- one job -------------------------------------------------------------------------------------------

    async def _run_job(self, job: Job, msg: dict) -> None:
        """Run a request and send its one terminal message; the only place a job ends."""
        try:
            await wait_loaded(
                self._loaded,
                self.progress,
                self.config.load_wait,
                lambda detail: self._job_send(job, "progress", stage="loading", detail=detail),
            )
            stats = await self._answer(job, msg)
            terminal = protocol.make("done", job.id, stats=stats)
        except asyncio.CancelledError:
            terminal = self._terminal(job)
        except (AgentError, StillLoading) as exc:
            terminal = protocol.error(job.id, exc.code, str(exc))
        except Exception as exc:
            log.exception("request %s failed", job.id)
            terminal = protocol.error(job.id, ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            del self._jobs[(job.peer, job.id)]
            for future in job.tools.values():
                future.cancel()
        if job.reason is Stop.VANISHED:
            return
        try:
            try:
                delivered = await self._send(job.route, terminal)
            except protocol.ProtocolError as exc:
                log.error("cannot encode the end of request %s: %s", job.id, exc)
                delivered = await self._send(
                    job.route, protocol.error(job.id, ErrorCode.INTERNAL, f"cannot encode reply: {exc}")
                )
        except zmq.ZMQError as exc:  # e.g. ETERM: the socket is closing at shutdown; the job is over anyway
            log.info("could not send the end of request %s: %s", job.id, exc)
            return
        if not delivered:
            log.info("could not deliver the end of request %s", job.id)

    def _terminal(self, job: Job) -> dict:
        """The one terminal message of a job the daemon stopped (or its client cancelled)."""
        if job.reason is Stop.SHUTDOWN:
            return protocol.error(job.id, ErrorCode.SHUTDOWN, "the daemon is shutting down")
        if job.reason is Stop.FAILURE and self.failure:
            return protocol.error(job.id, *self.failure)
        if job.reason is Stop.UNAUTHORIZED:
            return protocol.error(job.id, ErrorCode.UNAUTHORIZED, "this client's key is no longer authorized")
        if job.reason is Stop.REFUSED:
            return protocol.error(job.id, *job.refusal)
        return protocol.make("cancelled", job.id)

    async def _answer(self, job: Job, msg: dict) -> dict:
        """Run the model's loop for a request (an audit through the result store, when there is one)."""

        priority = Priority(msg.get("priority") or Priority.INTERACTIVE)

        async def run(send: Send, ask_tool: AskTool) -> dict:
            """The model's loop; each of its generations waits for this client's fair turn in the engine."""
            agent = Agent(
                self.scheduler,
                self.agent_config,
                send=send,
                ask_tool=ask_tool,
                priority=priority,
                owner=job.user,
                tally=self.tally,
                record=self.record,
                admit=lambda: self.fair.slot(job.user, priority),
            )
            return await getattr(agent, job.kind)(msg)  # Agent.audit, .explain or .rule

        def send(kind: str, **fields: Any) -> Awaitable[None]:
            return self._job_send(job, kind, **fields)

        def ask(tool: str, args: dict) -> Awaitable[tuple[bool, str]]:
            return self._ask_tool(job, tool, args)

        if job.kind != "audit":  # only audits are stored
            return await run(send, ask)
        if self.store is None:
            stats = await run(send, ask)
        else:
            views = await seen(self.scheduler.engine.tokenizer, self.agent_config, msg)
            fresh = bool(msg.get("fresh"))
            stats = await self.store.answer(views, self.info.fingerprint, job.user, fresh, send, ask, run)
        prefilled = int(stats.get("prompt_tokens", 0)) - int(stats.get("cached_tokens", 0))
        if prefilled > 0:
            self._counts["audits_prefilled"] += 1
            self._counts["audit_prefilled_tokens"] += prefilled
        return stats

    def _revoked(self, job: Job) -> bool:
        """Whether the job's key has left the allow-list; counted and logged once per job."""
        if self._allowed(job.user):
            return False
        if not job.reason:
            self._counts["unauthorized"] += 1
            log.warning("ending request %s: key %s is no longer in the authorized keys", job.id, job.user)
        return True

    async def _job_send(self, job: Job, kind: str, **fields: Any) -> None:
        if self._revoked(job):  # revoked mid-request: nothing more of it goes out
            job.reason = job.reason or Stop.UNAUTHORIZED
            raise asyncio.CancelledError
        if not await self._send(job.route, protocol.make(kind, job.id, **fields)):
            raise asyncio.CancelledError  # the peer is gone or frozen: _send already cancelled its jobs

    async def _ask_tool(self, job: Job, tool: str, args: dict) -> tuple[bool, str]:
        """Forward one read-only tool call to the client and wait (bounded) for its tool_result."""
        call = f"c{next(job.calls)}"
        future = asyncio.get_running_loop().create_future()
        job.tools[call] = future
        try:
            protocol.free_map(args, "args")
            await self._job_send(job, "tool_request", call=call, tool=tool, args=args)
            return await asyncio.wait_for(future, self.config.tool_timeout)
        except protocol.ProtocolError as exc:  # the model's arguments cannot travel (too deep, too large)
            return False, f"invalid arguments: {exc}"
        except TimeoutError:
            return False, f"the editor did not answer {tool} within {self.config.tool_timeout:g} s"
        finally:
            job.tools.pop(call, None)

    # --- sending -------------------------------------------------------------------------------------------

    async def _send(self, route: bytes, msg: dict) -> bool:
        """Send without ever blocking; a peer that cannot take the message loses its jobs. True if sent.

        A message that cannot be encoded raises ProtocolError: that is a fault of ours, not of the peer.
        """
        frame = protocol.encode(msg)
        try:
            await self._sock.send_multipart([route, frame], flags=zmq.DONTWAIT)
            return True
        except zmq.Again:
            why = "its queue is full (frozen client?)"
        except zmq.ZMQError as exc:
            if exc.errno != errno.EHOSTUNREACH:
                raise
            why = "it is gone"
        self._counts["send_failures"] += 1
        log.info("cannot send to peer %s: %s; cancelling its requests", route.hex(), why)
        self._drop_route(route)
        return False

    def _drop_route(self, route: bytes) -> None:
        self._counts["vanished"] += len(self._stop_route(route, Stop.VANISHED))

    def _stop_route(self, route: bytes, reason: Stop) -> set[str]:
        """Stop every job whose messages go to ``route``; returns their ids."""
        jobs = [job for job in self._jobs.values() if job.route == route]
        for job in jobs:
            job.stop(reason)
        return {job.id for job in jobs}

    async def _sweep_revoked(self) -> None:
        """End the requests of keys removed from the allow-list, also those that stream nothing (a silent
        client waiting in the queue or on a tool call): each ends with ``error`` ``unauthorized``."""
        while True:
            await asyncio.sleep(max(self.config.security.keys_reload_seconds, MIN_SWEEP_SECONDS))
            for job in [job for job in self._jobs.values() if self._revoked(job)]:
                job.stop(Stop.UNAUTHORIZED)

    # --- disconnects ---------------------------------------------------------------------------------------

    def _track_fd(self, frame: zmq.Frame, route: bytes) -> None:
        try:
            fd = frame.get(zmq.SRCFD)
        except (zmq.ZMQError, AttributeError):
            return
        self._disconnected(self._fd_routes.seen(fd, route))

    async def _watch(self, monitor: zmq.asyncio.Socket) -> None:
        """Cancel the requests of connections that closed or missed their heartbeats."""
        while True:
            event = await recv_monitor_message(monitor)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self._disconnected(self._fd_routes.disconnected(event["value"]))

    def _disconnected(self, route: bytes | None) -> None:
        if route is not None:
            log.info("peer %s disconnected", route.hex())
            self._drop_route(route)

    # --- replies -------------------------------------------------------------------------------------------

    def welcome(self) -> dict:
        info = self.info
        loading = {} if self._loaded.is_set() else {"loading": self.progress.snapshot()}
        fingerprint = {"fingerprint": info.fingerprint} if info.fingerprint else {}  # none yet: a hub repo loading
        # The prompt limit comes from the loaded model's context length: a client says hello again once loaded.
        prompt_limit = {} if self.scheduler is None else {"max_prompt_tokens": self.scheduler.engine.max_prompt_tokens}
        return {
            "protocol": protocol.VERSION,
            "server": __version__,
            "model": info.model_id,
            **fingerprint,
            "experts": info.experts,
            "ranks": info.ranks,
            **({"random_weights": True} if info.random_weights else {}),
            "state": self.progress.state,
            **loading,
            "limits": {
                "max_frame_bytes": protocol.MAX_FRAME_BYTES,
                "max_tokens": self.agent_config.budget("max"),
                "thinking_effort": self.agent_config.thinking_effort,
                "effort_tokens": {e: self.agent_config.budget(e) for e in protocol.EFFORTS},
                "max_open_requests": self.config.max_open_per_client,
                "max_tool_rounds": self.agent_config.max_tool_rounds,
                "tool_timeout": self.config.tool_timeout,
                "deadline": self.agent_config.deadline,
                "prompt_version": PROMPT_VERSION,
                **prompt_limit,
            },
        }

    def status(self, asker: str = "") -> dict:
        """The ``status`` reply: what is known while the model loads, and the engine's figures once it serves."""
        info = self.info
        out = {
            "model": info.model_id,
            "experts": info.experts,
            "ranks": info.ranks,
            "state": self.progress.state,
            "open_requests": len(self._jobs),
            "uptime": round(time.monotonic() - self._started, 1),
            **self._counts,
            "store": self.store.stats() if self.store is not None else None,
            "queues": self.queues(asker),
        }
        if self.scheduler is None:
            return out | {"loading": self.progress.snapshot()}
        s = self.scheduler.stats()
        return out | {
            "clients": len({p for p, _ in self._jobs}),
            "queued": s.get("queued", 0) + s.get("waiting", 0),
            "active": s.get("active", 0),
            "batch_size": s.get("decoding", 0),
            "batch_size_peak": max(s.get("batch_size_peak", 0), s["batch_peak"]),
            "tokens_per_s": round(float(s.get("tokens_per_s", 0.0)), 2),
            "steps_per_s": s["steps_per_s"],
            "loop_rate": s.get("loop_rate", 0.0),
            "stop_rate": s.get("stop_share", 0.0),
            "generations": s.get("generations", 0),
            **vars(self.tally),
            "engine": s,
        }

    def queues(self, asker: str) -> dict[str, dict[str, int]]:
        """Per client identity: requests open, waiting for a fair turn, and running. The asker's own is ``you``;
        the others are named by a salted hash of their identity only: no key, no path, no code."""
        open_now = Counter(job.user for job in self._jobs.values())
        depths = self.fair.depths()
        out = {}
        for user in sorted(set(open_now) | set(depths)):
            name = "you" if user == asker else "client-" + hashlib.sha256(self._salt + user.encode()).hexdigest()[:8]
            out[name] = {"open": open_now[user], **depths.get(user, {"waiting": 0, "running": 0})}
        return out


def _readable_id(raw: Any) -> str:
    """The request id of a decoded but not yet validated message, or UNKNOWN_ID, for addressing an error."""
    msg_id = raw.get("id") if isinstance(raw, dict) else None
    return msg_id if isinstance(msg_id, str) and 0 < len(msg_id) <= protocol.MAX_ID_CHARS else UNKNOWN_ID


def _reply_id(raw: Any) -> str:
    """The id an error about a message goes under: a ``cancel`` or ``tool_result`` gets no reply of its own (its
    request may have ended already, and ends exactly once), so its error has the id ``-``."""
    kind = raw.get("kind") if isinstance(raw, dict) else None
    return UNKNOWN_ID if kind in ("cancel", "tool_result") else _readable_id(raw)


def _id_of(frame: bytes) -> str:
    try:
        return _reply_id(protocol.unpack(frame))
    except protocol.ProtocolError:
        return UNKNOWN_ID
