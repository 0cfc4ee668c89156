"""Through the real language server and the real CURVE daemon: the keys in the settings reach the client, a
refused key shows as state ``unauthorized``, and the model's tool calls cannot leave the workspace.

The `..` escape through the LSP is also in tests/lsp/test_server_resilience.py and the sandbox itself in
tests/lsp/test_tools.py; here the model asks for an absolute path and for files behind symlinks that leave
the workspace, on the encrypted connection.
"""

from __future__ import annotations

from tests.security.conftest import SECRET
from tests.support.lsp import editor

ESCAPER_C = "static int escaper(void)\n{\n\treturn 0;\n}\n"


def workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "escaper.c").write_text(ESCAPER_C)
    (root / "plain.c").write_text("int plain(int n)\n{\n\treturn n;\n}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.c").write_text(f"int {SECRET};\n")
    (root / "link_out.c").symlink_to(outside / "secret.c")
    (root / "dir_out").symlink_to(outside)
    return root


def settings(daemon, keyring, client: str) -> dict:
    return {
        "endpoint": daemon.endpoint,
        "serverKey": str(keyring.server_public),
        "clientKey": str(keyring.clients[client][1]),
    }


async def test_tool_calls_leaving_the_workspace_are_refused(curve_daemon, keyring, tmp_path):
    root = workspace(tmp_path)
    async with editor(root, settings=settings(curve_daemon, keyring, "alice"), cache_dir=tmp_path / "c") as ed:
        uri = ed.open("escaper.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        assert summary["units"] == 1 and summary["error"] is None
        logs = [m.message for m in ed.client.log_messages if "model tool" in m.message]
    assert len(logs) == 4, logs
    assert "'/etc/passwd'" in logs[0] and "refused" in logs[0] and "absolute paths are not allowed" in logs[0]
    assert "'link_out.c'" in logs[1] and "resolves outside the workspace" in logs[1]
    assert "'dir_out/secret.c'" in logs[2] and "resolves outside the workspace" in logs[2]
    assert "'../outside/secret.c'" in logs[3] and "'..' is not allowed" in logs[3]
    assert not any(SECRET in m.message or "root:" in m.message for m in ed.client.log_messages)
    assert ed.status_notes[-1]["state"] == "connected"


async def test_a_refused_key_shows_as_unauthorized(curve_daemon, keyring, tmp_path):
    root = workspace(tmp_path)
    async with editor(root, settings=settings(curve_daemon, keyring, "mallory"), cache_dir=tmp_path / "c") as ed:
        uri = ed.open("plain.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        assert "refused this client's key" in summary["error"]
        assert ed.status_notes[-1]["state"] == "unauthorized"
        assert (await ed.status())["state"]["state"] == "unauthorized"
        warnings = [m.message for m in ed.client.messages if "refused this client's key" in m.message]
        assert len(warnings) == 1
