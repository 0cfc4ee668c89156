"""How the daemon's socket is secured: refusing unsafe set-ups before anything loads, then the gate and CURVE.

Every daemon socket sits behind the gate (backend/gate.py: the ZAP handler that decides who may connect
and names every connection). Without keys the socket is plain: the default is an ipc socket in a directory
only the daemon's user may enter (k3lsp/wire/local.py); a plain tcp socket, even on loopback, is reachable by
every local user and needs ``--insecure``. With keys it is a CurveZMQ server whose clients must hold a key
from the allow-list (backend/allowlist.py). Two pitfalls of libzmq, reproduced with pyzmq, are closed
here: ``ZAP_ENFORCE_DOMAIN`` without a ``zap_domain`` skips ZAP altogether, so both are set, and the ZAP
handler runs in the socket's own context (without one, a CURVE server accepts *any* key).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio

from backend.allowlist import RELOAD_SECONDS, AllowList, unsafe
from backend.gate import ZAP_DOMAIN, Gate
from backend.settings import flag
from k3lsp.wire import keys, local


@dataclass
class Security:
    """How the daemon's socket is secured: keys for CURVE, or ``insecure`` for a plain tcp socket."""

    server_secret: Path | None = field(
        default=None,
        metadata=flag(
            "the daemon's secret key file (k3-backend keys init): CurveZMQ on", name="--server-key", type=Path
        ),
    )
    authorized_dir: Path | None = field(
        default=None,
        metadata=flag("directory of authorized client *.key files (re-read live)", name="--authorized-keys", type=Path),
    )
    insecure: bool = field(
        default=False,
        metadata=flag(
            "allow a plain tcp socket (no encryption, no authentication): every local user, and beyond loopback "
            "everyone on the network, can connect or pose as the daemon"
        ),
    )
    keys_reload_seconds: float = field(
        default=RELOAD_SECONDS,
        metadata=flag(  # how stale the allow-list may be
            "look at --authorized-keys at most this often: how long a removed key may still be served"
        ),
    )


class InsecureBindError(Exception):
    """Refusal to expose source code to other users or the network."""


def check(endpoint: str, security: Security) -> None:
    """Refuse a set-up that would expose source code, before anything is loaded or bound.

    Without keys: an ipc socket whose directory is private to this user (created if missing), or a tcp
    socket with an explicit ``--insecure``. With keys: both halves, a secret key only its owner can read and
    an allow-list directory nobody else can write. Raises InsecureBindError or keys.KeyFileError.
    """
    if endpoint.startswith("ipc://"):
        try:
            local.private_socket(endpoint)
        except local.LocalSocketError as exc:
            raise InsecureBindError(f"refusing to serve {exc}") from None
    if security.server_secret is None:
        if security.authorized_dir is not None:
            raise InsecureBindError("--authorized-keys needs --server-key (the daemon's .key_secret file)")
        if not (endpoint.startswith("ipc://") or security.insecure):
            raise InsecureBindError(
                f"refusing to serve {endpoint} without encryption: on a plain tcp socket every user of this "
                "machine (and beyond loopback, everyone on the network) can connect, and anyone can pose as "
                "the daemon while it is down; use the default ipc socket, or run `k3-backend keys init` and pass "
                "--server-key/--authorized-keys, or pass --insecure if every user and the network are trusted"
            )
        return
    if security.authorized_dir is None:
        raise InsecureBindError("--server-key needs --authorized-keys (a directory of client *.key files)")
    if not security.authorized_dir.is_dir():
        raise InsecureBindError(f"--authorized-keys {security.authorized_dir} is not a directory")
    problem = unsafe(security.authorized_dir, security.authorized_dir.stat())
    if problem:
        raise InsecureBindError(f"refusing the authorized keys: {problem}")
    keys.load_secret(security.server_secret)


def secure_router(sock: zmq.asyncio.Socket, endpoint: str, security: Security) -> Gate:
    """Put ``sock`` behind the gate and, with keys, make it a CURVE server, before it binds; see ``check``.

    Stop the returned gate when the socket closes.
    """
    check(endpoint, security)
    allow = None
    if security.server_secret is not None:
        allow = AllowList(security.authorized_dir, security.keys_reload_seconds)
    gate = Gate(sock.context, allow=allow, local_uid=os.geteuid() if endpoint.startswith("ipc://") else None)
    try:
        if allow is not None:
            sock.curve_publickey, sock.curve_secretkey = keys.load_secret(security.server_secret)
            sock.curve_server = True
            allow.keys()  # reports unreadable key files at start
        sock.zap_domain = ZAP_DOMAIN.encode()
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    except BaseException:  # the caller gets no gate to stop: stop it here
        gate.stop()
        raise
    return gate
