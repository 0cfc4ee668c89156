"""The server when things go wrong: a superseded audit is cancelled, the daemon dies and comes back, and the
model tries to read outside the workspace. Real server, real `k3-backend` processes."""

from __future__ import annotations

from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.daemon import serving, stop
from tests.support.lsp import editor


async def test_a_newer_save_cancels_the_audit_of_the_older_version(daemon, tmp_path):
    root = scripted.workspace(tmp_path)
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("slow.c")
        ed.save(uri)  # slow_unit: the daemon is forced to generate 3000 tokens
        await ed.wait_for_status(lambda c: c["sent"] == 1)
        assert (await ed.status())["state"]["running"] == 1
        ed.change(uri, lsp.Range(lsp.Position(0, 11), lsp.Position(0, 15)), "fast")  # slow_unit -> fast_unit
        ed.save(uri)
        counters = await ed.wait_for_status(lambda c: c["audited"] == 1)
        assert counters["cancelled"] == 1 and counters["sent"] == 2
        status = await ed.status()
        assert status["backend"]["open_requests"] == 0  # the daemon really dropped the slow one
        assert status["state"]["running"] == 0 and status["state"]["queued"] == 0


async def test_a_tool_request_escaping_the_workspace_is_refused(daemon, tmp_path):
    root = scripted.workspace(tmp_path)
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("leaky.c")
        assert (await ed.command("k3lsp.auditFile", uri))["units"] == 1
        logs = [m.message for m in ed.client.log_messages if "model tool" in m.message]
        assert len(logs) == 2, logs
        assert "'../outside/secret.c'" in logs[0] and "refused" in logs[0] and "'..' is not allowed" in logs[0]
        assert "path='demo.c'" in logs[1] and "answered" in logs[1]
        assert not any("SECRET_TOKEN_42" in m.message for m in ed.client.log_messages)


async def test_files_outside_the_workspace_and_untitled_buffers_get_no_tools(daemon, tmp_path):
    """Their folder may be the home directory (or, for untitled, the server's cwd): the model reads nothing."""
    root = scripted.workspace(tmp_path)
    elsewhere = tmp_path / "outside"
    (elsewhere / "leaky.c").write_text(scripted.LEAKY_C)
    (elsewhere / "demo.c").write_text("int NEIGHBOUR_SECRET;\n")  # what the model asks for, beside the file
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        scratch = scripted.LEAKY_C.replace("return 0;", "return 0; /* scratch */")  # not a cache hit
        for uri, text in (((elsewhere / "leaky.c").as_uri(), scripted.LEAKY_C), ("untitled:Untitled-1", scratch)):
            item = lsp.TextDocumentItem(uri=uri, language_id="c", version=1, text=text)
            ed.client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=item))
            assert (await ed.command("k3lsp.auditFile", uri))["units"] == 1
        logs = [m.message for m in ed.client.log_messages if "model tool" in m.message]
        assert len(logs) == 4, logs
        assert all("refused" in log and "no workspace folder holds this file" in log for log in logs), logs
        assert not any("NEIGHBOUR_SECRET" in m.message for m in ed.client.log_messages)


async def test_backend_killed_and_restarted_keeps_cached_findings_and_recovers(tiny_model, tmp_path):
    root = scripted.workspace(tmp_path)
    with serving(tiny_model, script=scripted.SCRIPT, args=scripted.DAEMON_ARGS) as first:
        endpoint = first.endpoint
        async with editor(root, settings={"endpoint": endpoint}, cache_dir=tmp_path / "c") as ed:
            uri = ed.open("demo.c")
            assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 2
            stop(first.proc)

            # Edit get_slot and save: copy_msg's finding is cached and stays; get_slot cannot be audited.
            ed.change(uri, lsp.Range(lsp.Position(14, 8), lsp.Position(14, 8)), " ")
            summary = await ed.command("k3lsp.auditFile", uri)
            assert "not reachable" in summary["error"] or "stopped answering" in summary["error"]
            assert [d.code for d in await ed.diagnostics(uri)] == ["CWE-787"]
            warnings = [m.message for m in ed.client.messages if m.type == lsp.MessageType.Warning]
            assert len(warnings) == 1 and "cached findings" in warnings[0]
            assert ed.status_notes[-1]["state"] == "down"
            assert (await ed.status())["state"]["state"] == "down"

            with serving(tiny_model, script=scripted.SCRIPT, args=[*scripted.DAEMON_ARGS, "--bind", endpoint]):
                # The first trigger after the daemon is back works: the socket's reconnect backoff (which grew
                # while the daemon loaded) stays below the hello's wait.
                summary = await ed.command("k3lsp.auditFile", uri)
                assert summary["error"] is None and summary["findings"] == 2
                assert sorted(d.code for d in await ed.diagnostics(uri)) == ["CWE-129", "CWE-787"]
                assert ed.status_notes[-1]["state"] == "connected"
                assert any("is back" in m.message for m in ed.client.messages)


async def test_a_refused_key_is_one_clear_message_and_a_restart_with_the_right_one_recovers(tiny_model, tmp_path):
    from k3lsp.wire import keys

    server_public, server_secret = keys.init_keypair(tmp_path / "server", "server")
    _, good_secret = keys.init_keypair(tmp_path / "authorized", "good")
    _, bad_secret = keys.init_keypair(tmp_path / "strangers", "bad")
    root = scripted.workspace(tmp_path)
    args = [
        *scripted.DAEMON_ARGS,
        "--server-key",
        str(server_secret),
        "--authorized-keys",
        str(tmp_path / "authorized"),
    ]
    with serving(tiny_model, script=scripted.SCRIPT, args=args) as daemon:
        settings = {"endpoint": daemon.endpoint, "serverKey": str(server_public), "clientKey": str(bad_secret)}
        async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:
            uri = ed.open("demo.c")
            summary = await ed.command("k3lsp.auditFile", uri)
            assert "refused this client's key" in summary["error"]
            assert (await ed.status())["state"]["state"] == "unauthorized"
            # the status request asks the daemon again (a "connecting" note); its answer is the same refusal
            await ed.wait_for(lambda: ed.status_notes[-1]["state"] == "unauthorized", 10)
            warnings = [m.message for m in ed.client.messages if m.type == lsp.MessageType.Warning]
            assert len(warnings) == 1 and "refused this client's key" in warnings[0]

        # The user fixes the key in the settings the server starts with (the editors restart it on that change).
        settings |= {"clientKey": str(good_secret)}
        async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:
            summary = await ed.command("k3lsp.auditFile", ed.open("demo.c"))
            assert summary["error"] is None and summary["findings"] == 2
            assert ed.status_notes[-1]["state"] == "connected"
