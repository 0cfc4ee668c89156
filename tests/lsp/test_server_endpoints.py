"""The language server with several daemons (the `endpoint` setting as a list): interactive work moved to the
next one when its daemon dies mid-audit; a re-audit asks for a fresh audit. Real server, real `k3-backend`
processes."""

from __future__ import annotations

import asyncio

from tests.lsp import scripted
from tests.support.daemon import serving, stop
from tests.support.lsp import editor

MIXED_C = scripted.DEMO_C + "\n" + scripted.SLOW_C  # copy_msg, get_slot (quick), slow_unit (still generating)
SLOWER = {"unit": "slow_unit", "turns": [{"repeat": scripted.LONG_PERIOD, "tokens": 1000}]}  # goes before SCRIPT


async def test_one_daemon_killed_mid_audit_the_audit_completes_on_the_other(tiny_model, tmp_path):
    root = scripted.workspace(tmp_path)
    (root / "mixed.c").write_text(MIXED_C)
    script = [SLOWER, *scripted.SCRIPT]
    with (
        serving(tiny_model, script=script, args=scripted.DAEMON_ARGS, store=True) as first,
        serving(tiny_model, script=script, args=scripted.DAEMON_ARGS, store=True) as second,
    ):
        settings = {"endpoint": [first.endpoint, second.endpoint]}
        async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:
            uri = ed.open("mixed.c")
            task = asyncio.ensure_future(ed.command("k3lsp.auditFile", uri))
            # Both quick results have reached the server (a conversation the daemon traced may still be
            # answered `shutdown` when it stops before sending the result).
            await ed.wait_for_status(lambda c: c["audited"] == 2)
            assert first.sessions("copy_msg") and first.sessions("get_slot")
            assert not first.sessions("slow_unit")  # slow_unit is being generated on the first daemon
            stop(first.proc)
            summary = await task
            assert summary["error"] is None and summary["done"] == 3 and summary["findings"] == 2
            assert len(second.sessions("slow_unit")) == 1  # finished on the other daemon
            assert not second.sessions("copy_msg")  # interactive work stayed on the first while it lived
            assert [d.code for d in await ed.diagnostics(uri)] == ["CWE-787", "CWE-129"]
            status = await ed.status()
            assert status["state"]["state"] == "connected"
            assert status["endpoints"][first.endpoint]["state"] != "connected"
            assert status["endpoints"][second.endpoint]["state"] == "connected"

            # A re-audit asks past the daemon's store too: slow_unit, stored there, is generated again.
            line = MIXED_C.split("\n").index("static int slow_unit(int a)")
            assert (await ed.command("k3lsp.reauditFunction", uri, line))["done"] == 1
            store = (await ed.status())["backend"]["store"]
            assert (store["fresh"], store["answered"], store["kept"]) == (1, 0, 2)
            assert len(second.sessions("slow_unit")) == 2
