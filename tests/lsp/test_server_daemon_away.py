"""A client with no status view (Emacs/eglot: it ignores ``k3lsp/status``) is told when the daemon goes away and
when it is back, through ``window/showMessage``; the first save after the daemon returns is audited. Over the
daemon's default private ipc socket and over plain tcp on loopback (``--insecure`` on both sides)."""

from __future__ import annotations

import contextlib

import pytest
from lsprotocol import types as lsp

from backend.launch import stop
from k3lsp.wire import local
from tests.lsp import scripted
from tests.support.daemon import serving
from tests.support.lsp import WAIT, editor
from tests.support.pair import free_port_block

FEW_SECONDS = 10.0  # "within a few seconds": the connect timeout is 3 s; a loaded 2-core machine gets the rest


def warnings(ed) -> list[str]:
    return ed.shown(lsp.MessageType.Warning)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
async def test_a_client_without_the_status_view_is_told_and_the_first_save_after_the_return_is_audited(
    tiny_model, tmp_path, monkeypatch, transport
):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # the default socket of this test's user, private to it
    if transport == "ipc":
        bind, settings, insecure = local.default_endpoint(), {}, []
    else:
        bind = f"tcp://127.0.0.1:{free_port_block(1)}"
        settings, insecure = {"endpoint": bind, "insecure": True}, ["--insecure"]
    args = [*scripted.DAEMON_ARGS, *insecure]
    root = scripted.workspace(tmp_path)
    with contextlib.ExitStack() as first:
        daemon = first.enter_context(serving(tiny_model, script=scripted.SCRIPT, args=args, bind=bind))
        async with editor(root, profile="emacs", settings=settings, cache_dir=tmp_path / "c") as ed:
            uri = ed.open("demo.c")
            ed.save(uri)
            await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)

            stop(daemon.proc)  # SIGTERM: the daemon exits
            ed.change(uri, lsp.Range(lsp.Position(14, 8), lsp.Position(14, 8)), " ")  # get_slot needs the daemon
            ed.save(uri)
            await ed.wait_for(lambda: warnings(ed), FEW_SECONDS)
            assert len(warnings(ed)) == 1 and "Showing cached findings" in warnings(ed)[0], warnings(ed)
            assert [d.code for d in await ed.diagnostics(uri)] == ["CWE-787"]  # the unchanged function's, cached
            await ed.wait_for_status(lambda c: c["sent"] >= 2 and _idle(ed), WAIT)  # the save has given up

            with serving(tiny_model, script=scripted.SCRIPT, args=args, bind=bind):
                before = (await ed.status())["counters"]["audited"]
                ed.save(uri)  # once
                await ed.wait_for_status(lambda c: c["audited"] == before + 1, WAIT)
                back = await ed.wait_for(lambda: [m for m in ed.shown(lsp.MessageType.Info) if "is back" in m])
    assert len(back) == 1 and len(warnings(ed)) == 1


def _idle(ed) -> bool:
    """No progress bar of an audit left open: the save's run has ended (its unit left, with the reason)."""
    ends = [v for values in ed.client.progress_reports.values() for v in values]
    begun = sum(isinstance(v, lsp.WorkDoneProgressBegin) for v in ends)
    return begun > 0 and begun == sum(isinstance(v, lsp.WorkDoneProgressEnd) for v in ends)


async def test_with_no_daemon_at_all_the_user_is_told_once_and_the_status_still_answers(tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # nobody listens on this user's default socket
    root = scripted.workspace(tmp_path)
    async with editor(root, profile="emacs", cache_dir=tmp_path / "c") as ed:
        ed.open("demo.c")  # contacts the daemon in the background
        await ed.wait_for(lambda: warnings(ed), FEW_SECONDS)
        status = await ed.status()
        ed.save(ed.uri("demo.c"))
        await ed.wait_for_status(lambda c: c["units"] >= 2 and _idle(ed), WAIT)
    assert status["backend"] is None and status["state"]["state"] == "down" and "not reachable" in status["error"]
    assert len(warnings(ed)) == 1  # the save found it still down: nothing new to say
