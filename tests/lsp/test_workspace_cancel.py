"""Cancelling a workspace audit from the editor answers its request (issue 39).

``window/workDoneProgress/cancel`` on the ``k3 audit workspace`` progress stopped the work, but the
``k3lsp.auditWorkspace`` request was never answered and the server logged ``ERROR asyncio ... CancelledError``:
pygls runs a command as a generator step, and a cancelled command task is a BaseException that step does not
catch. The answer is now a result that says it was cancelled, with the files finished by then. The fake daemon
holds ``slow_unit`` until it is cancelled (the ``logic`` tier)."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.lsp import WAIT, editor

pytestmark = pytest.mark.logic


async def held_workspace_audit(ed) -> tuple[asyncio.Future, str]:
    """Start ``k3lsp.auditWorkspace`` and wait until the fake holds ``slow_unit`` with the rest done: (the
    request's answer to come, its progress token)."""
    params = lsp.ExecuteCommandParams(command="k3lsp.auditWorkspace", arguments=[])
    answer = asyncio.ensure_future(ed.client.workspace_execute_command_async(params))

    async def holding() -> None:  # "sent and audited" alone could be demo.c's while slow.c was still being split
        while True:
            status = await ed.status()
            asked = [c.get("unit") for c in (status["backend"] or {}).get("calls", [])]  # None: no hello yet
            if status["counters"]["audited"] >= 1 and "slow_unit" in asked:
                return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(holding(), WAIT)
    return answer, await ed.wait_for(lambda: ed.progress_token("k3 audit workspace"))


async def test_cancelling_the_workspace_progress_answers_the_request_as_cancelled(fake, tmp_path):
    root = scripted.workspace(tmp_path)
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        answer, token = await held_workspace_audit(ed)
        ed.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
        report = await asyncio.wait_for(answer, WAIT)
        counters = await ed.wait_for_status(lambda c: c["cancelled"] >= 1)
        reports = ed.client.progress_reports[token]
        await ed.wait_for(lambda: isinstance(reports[-1], lsp.WorkDoneProgressEnd))
        state = (await ed.status())["state"]
    assert report["cancelled"] is True and report["error"] is None, report
    assert 0 < report["files"] < 3  # demo.c and leaky.c, not the held slow.c
    assert counters["cancelled"] == 1 and state["running"] == state["queued"] == 0
    assert not [line for line in ed.stderr if "CancelledError" in line or "ERROR" in line], ed.stderr


async def test_cancelling_the_request_itself_stops_its_work(fake, tmp_path):
    """``$/cancelRequest`` on ``k3lsp.auditWorkspace``: answered as cancelled (pygls does it), and the work stops
    with it: the held unit is cancelled at the daemon and the progress ends, as with the progress's cancel."""
    root = scripted.workspace(tmp_path)
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        answer, token = await held_workspace_audit(ed)
        (request,) = ed.client.protocol._request_futures  # the command's: the status requests were answered
        ed.client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id=request))
        with pytest.raises(Exception, match="cancel"):
            await asyncio.wait_for(answer, WAIT)
        counters = await ed.wait_for_status(lambda c: c["cancelled"] >= 1)
        reports = ed.client.progress_reports[token]
        await ed.wait_for(lambda: isinstance(reports[-1], lsp.WorkDoneProgressEnd))
    assert counters["cancelled"] == 1
