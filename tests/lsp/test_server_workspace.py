"""Cancelling an audit from the editor's progress UI (window/workDoneProgress/cancel) reaches the daemon. Real
server, real scripted `k3-backend`; workspace audits with include/exclude/maxFileBytes and the same cancel on the
fake daemon: test_server_logic.py."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.lsp import WAIT, editor


@pytest.mark.parametrize("profile", ["neovim", "pull"])
async def test_cancelling_the_progress_cancels_the_backend_request(daemon, tmp_path, profile):
    root = scripted.workspace(tmp_path)
    async with editor(root, profile=profile, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("slow.c")
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["sent"] == 1)
        token = await ed.wait_for(lambda: ed.progress_token("k3 audit slow.c"))
        begin = ed.client.progress_reports[token][0]
        assert begin.cancellable and begin.message == "0/1"
        ed.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
        counters = await ed.wait_for_status(lambda c: c["cancelled"] == 1)
        assert counters["audited"] == 0
        await ed.wait_for(lambda: isinstance(ed.client.progress_reports[token][-1], lsp.WorkDoneProgressEnd))
        status = await ed.status()
        assert status["diagnostics"] == ("pull" if profile == "pull" else "push")  # Neovim 0.11 cannot re-pull
        assert status["state"]["running"] == 0

        async def daemon_idle():  # the daemon frees the request within a scheduling step
            while (await ed.status())["backend"]["open_requests"]:
                await asyncio.sleep(0.1)

        await asyncio.wait_for(daemon_idle(), WAIT)
