"""A connection reaches ``down`` on every way a daemon can be absent, says why once, and loses no task."""

from __future__ import annotations

import pytest

from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import ConnState
from tests.support.core import audit, targets
from tests.support.pair import free_port_block

SOURCE = "int f(int a)\n{\n\treturn a;\n}\n"


@pytest.mark.parametrize("absent", ["no socket file", "nobody on the tcp port"])
async def test_a_send_to_no_daemon_ends_down_and_leaves_no_task_failure_behind(tmp_path, absent, monkeypatch):
    monkeypatch.setattr("k3lsp.core.pool.RETRY_DELAYS", (0.05, 0.05, 0.05))
    if absent == "no socket file":
        private = tmp_path / "run"
        private.mkdir(mode=0o700)
        options = Options(endpoint=f"ipc://{private}/daemon.sock")
    else:
        options = Options(endpoint=f"tcp://127.0.0.1:{free_port_block(1)}", insecure=True)
    states: list = []
    pool = Pool(options, ResultCache(tmp_path / "c.sqlite"), on_state=lambda s: states.append(s))
    try:
        results, summary = await audit(pool, targets(SOURCE), timeout=60)
    finally:
        await pool.close()
    assert results == [] and [t.unit.name for t in summary.left] == ["f"]
    assert pool.connections[0].state is ConnState.DOWN
    first_down = next(s for s in states if s.state is ConnState.DOWN)
    assert "not reachable (nothing took a message within 3 s)" in first_down.message  # the first hello's bound
    assert "not reachable" in summary.unavailable
    # (the autouse fixture lost_task_failures fails the test if a task's exception went unretrieved)
