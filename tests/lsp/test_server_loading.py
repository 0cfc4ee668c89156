"""A daemon that is still loading its model: the language server says so (k3lsp/status state `loading`, with
the percentage the editors show as "backend loading (N %)"), and an audit started meanwhile completes once the
model is loaded instead of failing."""

from __future__ import annotations

import tempfile

from backend import launch
from tests.lsp import scripted
from tests.support.daemon import serving
from tests.support.lsp import editor


async def test_the_server_shows_the_backend_loading_then_audits(tiny_model, tmp_path):
    root = scripted.workspace(tmp_path)
    with tempfile.TemporaryDirectory(prefix="k3d-") as private:
        endpoint = f"ipc://{private}/daemon.sock"
        # The language server first (it starts slowly on a busy machine), then the daemon it will find loading.
        async with editor(root, settings={"endpoint": endpoint}, cache_dir=tmp_path / "c") as ed:
            with serving(
                tiny_model,
                script=scripted.SCRIPT,
                bind=endpoint,
                until=launch.LISTENING,
                args=[*scripted.DAEMON_ARGS, "--load-pace", "1.0"],
            ):
                uri = ed.open("demo.c")  # the server says hello in the background: the daemon answers, loading
                await ed.wait_for(lambda: ed.status_notes and ed.status_notes[-1]["state"] == "loading")
                status = await ed.status()  # asks the daemon itself, while it loads
                assert status["backend"]["state"] == "loading", status
                assert 0 <= status["backend"]["loading"]["percent"] < 100
                summary = await ed.command("k3lsp.auditFile", uri, timeout=120)
                assert summary["done"] == 2 and summary["error"] is None, summary
                diagnostics = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
                assert sorted(d.code for d in diagnostics) == ["CWE-129", "CWE-787"]
                await ed.wait_for(lambda: ed.status_notes[-1]["state"] == "connected")
    loading = [n for n in ed.status_notes if n["state"] == "loading"]
    assert loading, ed.status_notes
    assert all(n["message"].startswith("backend loading (") for n in loading), loading
    assert all(isinstance(n["percent"], int) and 0 <= n["percent"] < 100 for n in loading), loading
    states = [n["state"] for n in ed.status_notes]
    assert states.index("loading") < len(states) - 1 - states[::-1].index("connected")  # loading, then connected
    assert "down" not in states and "unreachable" not in str(ed.status_notes)
