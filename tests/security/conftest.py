"""One CURVE-secured `k3-backend serve` process on the tiny checkpoint for the security tests, and its keys.

The keyring mirrors the Mac-pair set-up made by the real `keys init` code: a daemon key pair, an
``authorized/`` directory holding the public keys of the clients allowed in, and client key pairs of which
only some are authorised.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from k3lsp.core.client import ClientOptions, DaemonClient
from k3lsp.wire import keys
from tests.support import kimi
from tests.support.daemon import Wire, serving

# A generation of a few thousand tokens with a period too long for the loop guard: keeps a request open.
LONG = " ".join(f"w{i}" for i in range(40)) + " "
SECRET = "SECRET_TOKEN_77"
VARIED = " ".join(f"t{i}" for i in range(1000))  # long text without a short period (the loop guard stays quiet)


def script() -> list[dict]:
    """The units' scripted answers; built when a daemon starts (typed tool calls need the backend's transformers)."""
    return [
        {"unit": "holder", "turns": [kimi.turn(("read_lines", {"path": "src/f.c", "start": 1, "end": 2}))]},
        {"unit": "long", "turns": [{"repeat": LONG, "tokens": 3000}]},
        {
            "unit": "liar",
            "turns": [
                kimi.turn(
                    ("report_finding", kimi.finding()),  # the only valid one
                    ("report_finding", kimi.finding(start_line=2, end_line=99)),  # past the unit's 4 lines
                    ("report_finding", kimi.finding(cwe="CWE-787")),
                    ("report_finding", kimi.finding(cwe=0)),
                    ("report_finding", kimi.finding(severity="urgent")),
                    ("report_finding", kimi.finding(title=VARIED[:250])),  # over the 200-character title limit
                    (
                        "report_finding",
                        kimi.finding(trace=[{"line": 1, "note": VARIED[:2100]}]),
                    ),  # over the 2000-char note
                )
            ],
        },
        {
            "unit": "escaper",
            "turns": [
                kimi.turn(("read_lines", {"path": "/etc/passwd", "start": 1, "end": 5})),
                kimi.turn(("read_lines", {"path": "link_out.c", "start": 1, "end": 5})),
                kimi.turn(("read_lines", {"path": "dir_out/secret.c", "start": 1, "end": 5})),
                kimi.turn(("read_lines", {"path": "../outside/secret.c", "start": 1, "end": 5})),
                kimi.turn(content="nothing to report"),
            ],
        },
        {"unit": "chatty", "turns": [kimi.turn(content=VARIED)]},  # an explanation streamed as thousands of messages
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


# The tiny tokenizer is ~1 token/char. The daemon looks at authorized/ on every check: a key added or removed
# counts from the next message, so no test waits for the allow-list to be re-read.
DAEMON_ARGS = ["--max-tokens", "6000", "--max-open-per-client", "8", "--keys-reload-seconds", "0"]


@dataclass
class Keyring:
    server_public: Path
    server_secret: Path
    authorized: Path
    clients: dict[str, tuple[Path, Path]]  # name -> (public, secret)
    other_server_public: Path  # a daemon key that is not the one serving

    def options(self, endpoint: str, client: str, *, server: Path | None = None, **kw) -> ClientOptions:
        return ClientOptions(
            endpoint=endpoint,
            server_key=server or self.server_public,
            client_key=self.clients[client][1],
            connect_timeout=3.0,
            **kw,
        )

    def client(self, endpoint: str, name: str, **kw) -> DaemonClient:
        return DaemonClient(self.options(endpoint, name, **kw))

    def authorize(self, name: str) -> None:
        shutil.copy(self.clients[name][0], self.authorized / f"{name}.key")

    def revoke(self, name: str) -> None:
        (self.authorized / f"{name}.key").unlink()

    def wire(self, endpoint: str, name: str, **kw) -> Wire:
        """A raw DEALER with ``name``'s keys: the test sees exactly the frames on the wire."""
        public, secret = keys.load_secret(self.clients[name][1])
        return Wire(endpoint, curve=(keys.load_public(self.server_public), public, secret), **kw)


def team_keyring(root: Path, names: tuple[str, ...]) -> Keyring:
    """A daemon key pair and a key pair per name, every one of them authorised."""
    keys.init_server(root / "daemon")
    people = {name: keys.init_keypair(root / "clients", name) for name in names}
    daemon = root / "daemon"
    ring = Keyring(
        daemon / "server.key", daemon / "server.key_secret", daemon / "authorized", people, daemon / "server.key"
    )
    for name in names:
        ring.authorize(name)
    return ring


@pytest.fixture(scope="package")
def keyring(tmp_path_factory) -> Keyring:
    root = tmp_path_factory.mktemp("keys")
    keys.init_server(root / "daemon")
    keys.init_server(root / "other")
    clients = {name: keys.init_keypair(root / "clients", name) for name in ("alice", "bob", "mallory", "late")}
    daemon = root / "daemon"
    ring = Keyring(
        daemon / "server.key",
        daemon / "server.key_secret",
        daemon / "authorized",
        clients,
        root / "other" / "server.key",
    )
    ring.authorize("alice")
    ring.authorize("bob")
    return ring


@pytest.fixture(scope="package")
def curve_daemon(tiny_model, keyring):
    args = [*DAEMON_ARGS, "--server-key", str(keyring.server_secret), "--authorized-keys", str(keyring.authorized)]
    with serving(tiny_model, script=script(), args=args) as d:
        yield d
