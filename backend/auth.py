"""CurveZMQ on the daemon's ROUTER: encryption, an allow-list of client keys, and who owns each message.

Three measured pitfalls (notes/zmq-research.md §2) shape this module: a CURVE server whose context has no
ZAP handler accepts *any* client key; ``ZAP_ENFORCE_DOMAIN`` without a ``zap_domain`` skips ZAP altogether;
and pyzmq's ``configure_curve`` reads the allow-list once. So the authenticator runs in the socket's own
context, the domain is set and enforced, and the allow-list is a directory re-read whenever it changes
(add or remove a ``*.key`` file; no restart). The daemon also checks each message's authenticated
``User-Id`` against the allow-list, so a key removed while its connection is open stops being served.
That check runs per message, so the directory is looked at no more than once per RELOAD_SECONDS: a change
takes effect within that time.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.auth.certs import load_certificates

from k3lsp import keys

log = logging.getLogger(__name__)

ZAP_DOMAIN = "k3audit"
RELOAD_SECONDS = 1.0  # how stale the allow-list may be: the price of not scanning a directory per message


class AllowList:
    """The z85 public keys of authorised clients, re-read when the directory changes."""

    def __init__(self, directory: Path, reload_seconds: float = RELOAD_SECONDS):
        self.directory = directory
        self.reload_seconds = reload_seconds
        self._checked: float | None = None  # monotonic time of the last look at the directory
        self._stamp: tuple | None = None
        self._keys: frozenset[bytes] = frozenset()

    def _current_stamp(self) -> tuple:
        try:
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except OSError:
            return ()
        stamp = []
        for entry in entries:
            if not entry.name.endswith(".key"):
                continue
            try:  # a key file removed between scandir and stat is simply gone
                info = entry.stat()
            except OSError:
                continue
            stamp.append((entry.name, info.st_mtime_ns, info.st_size))
        return tuple(stamp)

    def keys(self) -> frozenset[bytes]:
        now = time.monotonic()
        if self._checked is not None and now - self._checked < self.reload_seconds:
            return self._keys
        self._checked = now
        stamp = self._current_stamp()
        if stamp != self._stamp:
            try:
                self._keys = frozenset(load_certificates(self.directory))
            except (OSError, ValueError) as exc:
                log.error(
                    "cannot read the authorized keys in %s (%s): refusing every client until fixed", self.directory, exc
                )
                self._keys = frozenset()
                stamp = None  # read again next time: the directory may have changed under the read
            self._stamp = stamp
            log.info("authorized client keys: %d (from %s)", len(self._keys), self.directory)
        return self._keys

    def allows(self, z85_key: bytes | str) -> bool:
        key = z85_key.encode() if isinstance(z85_key, str) else z85_key
        return key in self.keys()

    def callback(self, domain: str, z85_key: bytes) -> bool:
        """ZAP credentials callback (pyzmq's ``configure_curve_callback`` protocol).

        Never raises: an exception here ends pyzmq's ZAP handler task, and every later CURVE handshake
        would hang unanswered. Anything unexpected denies the client instead.
        """
        try:
            return domain == ZAP_DOMAIN and self.allows(z85_key)
        except Exception:
            log.exception("checking a client key failed: denied")
            return False


@dataclass
class Security:
    """How the daemon's socket is secured; ``None`` keys with ``insecure`` means plain TCP."""

    server_secret: Path | None = None
    authorized_dir: Path | None = None
    insecure: bool = False


class InsecureBindError(Exception):
    """Refusal to expose unencrypted source code beyond this machine."""


def is_loopback(endpoint: str) -> bool:
    """True for ipc://, inproc:// and tcp:// endpoints bound to a loopback address only."""
    parts = urlsplit(endpoint)
    if parts.scheme in ("ipc", "inproc"):
        return True
    host = (parts.hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", an interface name or a host name: may face the network


@dataclass
class CurveServer:
    """A running ZAP handler and the allow-list it consults; stop it when the socket closes."""

    allow: AllowList
    authenticator: AsyncioAuthenticator

    def stop(self) -> None:
        self.authenticator.stop()


def check(endpoint: str, security: Security) -> None:
    """Refuse a set-up that would expose source code, before anything is loaded or bound.

    A plain socket is allowed on loopback, or anywhere with an explicit ``--insecure``. Key files are read
    here too, so a missing or world-readable secret key stops ``serve`` before a model load of minutes.
    Raises InsecureBindError or keys.KeyFileError.
    """
    if security.server_secret is None:
        if security.authorized_dir is not None:
            raise InsecureBindError("--authorized-keys needs --server-key (the daemon's .key_secret file)")
        if not (is_loopback(endpoint) or security.insecure):
            raise InsecureBindError(
                f"refusing to serve {endpoint} without encryption: run `k3-backend keys init` and pass "
                "--server-key/--authorized-keys, or pass --insecure if this network is trusted"
            )
        return
    if security.authorized_dir is None:
        raise InsecureBindError("--server-key needs --authorized-keys (a directory of client *.key files)")
    if not security.authorized_dir.is_dir():
        raise InsecureBindError(f"--authorized-keys {security.authorized_dir} is not a directory")
    keys.load_secret(security.server_secret)


def secure_router(sock: zmq.asyncio.Socket, endpoint: str, security: Security) -> CurveServer | None:
    """Make ``sock`` a CURVE server with ZAP before it binds (None when it stays plain); see ``check``."""
    check(endpoint, security)
    if security.server_secret is None:
        return None
    public, secret = keys.load_secret(security.server_secret)
    allow = AllowList(security.authorized_dir)
    auth = AsyncioAuthenticator(sock.context)  # must share the socket's context, or no ZAP handler sees it
    auth.start()
    try:
        auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=allow)
        sock.curve_secretkey = secret
        sock.curve_publickey = public
        sock.curve_server = True
        sock.zap_domain = ZAP_DOMAIN.encode()
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        allow.keys()
    except BaseException:  # the caller gets no CurveServer to stop: stop the ZAP handler here
        auth.stop()
        raise
    return CurveServer(allow, auth)
