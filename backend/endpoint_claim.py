"""One daemon per endpoint: `serve` claims its endpoint before it loads anything, and refuses one that is taken.

libzmq's ipc bind unlinks whatever file has the socket's name, so without this a second `serve` on the same
ipc endpoint took it over silently, and the first kept its weights (0.75 TB on the Mac pair) loaded where no
client could reach it. On tcp the second bind fails, but only after the model's files were read, and without
saying who holds the port.

The claim is a lock file, held with ``flock`` for the daemon's life (the kernel lets go when the process
ends, however it ends), holding the daemon's pid for the refusal to name: ``<socket>.lock`` beside an ipc
socket, in its private directory; ``tcp-PORT.lock`` in the user's own runtime directory for a tcp port.
Two serves starting at once race for the lock, and ``flock`` lets exactly one win. With the lock taken, a
socket file left by a daemon that was killed (nothing answers a connect) is removed, while one that answers
(something that is not a serve of this user, which would hold the lock) is refused with its pid where the
kernel says it (SO_PEERCRED).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import struct
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from k3lsp.wire import local

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 2.0  # seconds a connect to the endpoint may take before it counts as nothing answering
WILDCARDS = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}


class EndpointTaken(Exception):
    """Another daemon (or another program) serves the endpoint; the message names it and what to do."""


def claim(endpoint: str) -> IO[str] | None:
    """Claim ``endpoint`` for this process: the open lock file, to keep open (referenced) while serving; None
    for a tcp port 0, which is never taken. Raises EndpointTaken. Call it after ``auth.check``, which makes
    and checks an ipc socket's private directory."""
    if endpoint.startswith("ipc://"):
        path = Path(endpoint.removeprefix("ipc://"))
        held = _lock(Path(f"{path}.lock"), endpoint)
        _refuse_a_listener(endpoint, socket.AF_UNIX, str(path))
        if path.is_socket():
            log.info("replacing %s: nothing answers behind it (its daemon was killed)", path)
            path.unlink(missing_ok=True)
        return held
    host, port = _host_port(endpoint)
    if port == 0:
        return None
    try:
        directory = local.private_socket(f"ipc://{local.home_runtime() / local.SOCKET_NAME}").parent
    except local.LocalSocketError as exc:  # the port is still probed below, and bind refuses a taken one
        log.warning("no lock for %s, so two serves starting at once may race for it: %s", endpoint, exc)
        held = None
    else:
        held = _lock(directory / f"tcp-{port}.lock", endpoint)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    _refuse_a_listener(endpoint, family, (host, port))
    return held


def _lock(path: Path, endpoint: str) -> IO[str]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    held = os.fdopen(fd, "r+")
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = held.read().strip()
        held.close()
        who = f"pid {pid}" if pid.isdigit() else "pid not written yet: it is starting"
        stop = f"stop it first (kill {pid})" if pid.isdigit() else "stop it first"
        raise EndpointTaken(
            f"{endpoint} is served by another k3-backend serve ({who}); {stop}, or serve on another --bind"
        ) from None
    held.truncate(0)
    held.write(f"{os.getpid()}\n")
    held.flush()
    return held


def _refuse_a_listener(endpoint: str, family: socket.AddressFamily, address) -> None:
    """EndpointTaken when something accepts a connection at ``address``."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT)
        try:
            probe.connect(address)
        except OSError:  # refused, no such file, no such host, timed out: nothing answers (bind says the rest)
            return
        pid = _peer_pid(probe) if family == socket.AF_UNIX else None
    who = f" (pid {pid})" if pid else ""
    raise EndpointTaken(
        f"{endpoint} already answers{who}, and not as a k3-backend serve of this user; stop that program, "
        "or serve on another --bind"
    )


def _peer_pid(sock: socket.socket) -> int | None:
    """The pid of a unix socket's peer, where the kernel says it (Linux)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    with contextlib.suppress(OSError):
        pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return pid or None
    return None


def _host_port(endpoint: str) -> tuple[str, int]:
    """The host to probe and the port of a ``tcp://HOST:PORT`` endpoint (a wildcard host probes loopback)."""
    address = endpoint.removeprefix("tcp://")
    host, _, port = address.rpartition(":")
    host = WILDCARDS.get(host, host)
    return urlsplit(f"//{host}").hostname or host, int(port) if port.isdigit() else 0
