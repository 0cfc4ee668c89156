"""secure_router leaves nothing running when it fails half-way: the ZAP handler it started is stopped."""

import pytest
import zmq
import zmq.asyncio

from backend import auth
from k3lsp import keys


async def test_a_failure_after_the_zap_handler_started_stops_it(tmp_path, monkeypatch):
    keys.init_server(tmp_path)
    security = auth.Security(server_secret=tmp_path / "server.key_secret", authorized_dir=tmp_path / "authorized")
    started, stopped = [], []
    real_start, real_stop = auth.AsyncioAuthenticator.start, auth.AsyncioAuthenticator.stop

    def record_start(self):
        started.append(self)
        real_start(self)

    def record_stop(self):
        stopped.append(self)
        real_stop(self)

    def broken(self, *args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(auth.AsyncioAuthenticator, "start", record_start)
    monkeypatch.setattr(auth.AsyncioAuthenticator, "stop", record_stop)
    monkeypatch.setattr(auth.AsyncioAuthenticator, "configure_curve_callback", broken)
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            auth.secure_router(sock, "tcp://127.0.0.1:0", security)
        assert len(started) == 1 and stopped == started
    finally:
        for authenticator in started:
            if authenticator not in stopped:  # so that ctx.term() below does not wait on its socket forever
                real_stop(authenticator)
        sock.close(0)
        ctx.term()
