"""A client process that starts a long streamed request and then stops reading: the frozen editor of the tests.

Run as ``python -m tests.support.stream_client ENDPOINT SERVER_KEY CLIENT_SECRET UNIT``. It sends an
``explain`` of UNIT (a script makes it thousands of ``text`` messages), prints ``streaming`` once the first
message arrives, and then sleeps without reading, so the test can SIGSTOP it with its socket full.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import zmq

from k3lsp.wire import keys, protocol
from tests.support.daemon import audit_fields
from tests.support.kimi import finding


def main(endpoint: str, server_key: str, client_secret: str, unit: str) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 10)  # hold little on our side, so the daemon's side fills
    sock.curve_serverkey = keys.load_public(Path(server_key))
    sock.curve_publickey, sock.curve_secretkey = keys.load_secret(Path(client_secret))
    sock.connect(endpoint)
    sock.send(protocol.encode(protocol.make("explain", "frozen", **audit_fields(unit), finding=finding())))
    if not sock.poll(60_000):
        sys.exit("no answer from the daemon")
    print("streaming", flush=True)
    time.sleep(600)  # never read again; the test stops and kills this process long before


if __name__ == "__main__":
    main(*sys.argv[1:5])
