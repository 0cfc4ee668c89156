"""The audited repository does not choose the daemon that receives its code, nor the keys that say who it is.

The attack: a repository's `.vscode/settings.json` set `k3lsp.endpoint`, `serverKey`, `clientKey` and
`insecure`; trusted so that it could be audited, its values applied, and its own daemon got the code and
answered a forged CWE-787 whose preferred quick fix inserts `system(getenv(...))`. VS Code answers a
`workspace/configuration` item without a `scopeUri` with the workspace's values over the user's, and other
clients fill it from project files too (eglot: `.dir-locals.el`), so the server takes those settings from
initializationOptions (what the editor's own configuration started it with) only, and says when a workspace
value was ignored. The extension's side (user settings only, `machine` scope, untrusted workspaces) is checked
in editors/vscode/test and in the real workbench (tests/editors/test_vscode_workbench.py).
"""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from k3lsp.core import options
from tests.lsp import scripted
from tests.support.fake_daemon import FakeScript
from tests.support.lsp import editor

USER = {"endpoint": "ipc:///run/user/1000/k3lsp/daemon.sock", "clientKey": "/home/me/.config/k3lsp/me.key_secret"}
REPOSITORY = {
    "endpoint": "tcp://attacker.example:5555",
    "serverKey": "/repo/.k3/attacker.key",
    "clientKey": "/repo/.k3/me.key_secret",
    "insecure": True,
    "minSeverity": "high",  # a project's own choice, which it may make
}


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    script = FakeScript(tmp_path / "fake-auditor.json")
    script.write(scripted.FAKE)
    return script


def connected(status: dict) -> list[dict]:
    """What each hello of the server went out with: the endpoint, the keys, insecure."""
    return [{k: v for k, v in c.items() if k != "op"} for c in status["backend"]["calls"] if c["op"] == "hello"]


async def test_workspace_configuration_chooses_no_endpoint_key_or_insecurity(fake, tmp_path):
    root = scripted.workspace(tmp_path)
    async with editor(root, settings=USER, configuration=REPOSITORY, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        ed.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        status = await ed.status()
        diagnostics = await ed.diagnostics(uri)
        errors = [m.message for m in ed.client.messages if m.type == lsp.MessageType.Error]
    assert status["endpoint"] == USER["endpoint"]
    expected = {"endpoint": USER["endpoint"], "server_key": "", "client_key": USER["clientKey"], "insecure": False}
    assert connected(status) and all(c == expected for c in connected(status)), connected(status)
    assert summary["error"] is None and [d.code for d in diagnostics] == ["CWE-787"]  # minSeverity high applied
    (ignored,) = errors  # said once, though the settings were read twice
    assert "ignored endpoint, serverKey, clientKey, insecure from the workspace settings" in ignored
    assert "restart the server" in ignored


async def test_the_same_values_in_both_places_are_not_an_error(fake, tmp_path):
    """Neovim's users may put the endpoint in `settings` as well: nothing is ignored then, nothing said."""
    root = scripted.workspace(tmp_path)
    async with editor(root, settings=USER, configuration=USER, fake=fake, cache_dir=tmp_path / "c") as ed:
        await ed.command("k3lsp.auditFile", ed.open("demo.c"))
        errors = [m.message for m in ed.client.messages if m.type == lsp.MessageType.Error]
        status = await ed.status()
    assert errors == [] and status["endpoint"] == USER["endpoint"]


def test_parse_workspace_keeps_the_connection_of_the_initialization_options():
    initial, _ = options.parse(USER)
    parsed, errors = options.parse_workspace({"k3lsp": REPOSITORY}, initial)
    assert (parsed.endpoint, parsed.server_key, parsed.client_key, parsed.insecure) == (
        USER["endpoint"], "", USER["clientKey"], False,
    )  # fmt: skip
    assert parsed.min_severity == "high" and len(errors) == 1
    listed, errors = options.parse_workspace({"endpoint": [USER["endpoint"], "tcp://other:1"]}, initial)
    assert listed.endpoints == (USER["endpoint"],) and "ignored endpoint" in errors[0]  # a list is no way round
    assert options.parse_workspace({"minSeverity": "low"}, initial)[0].client_key == USER["clientKey"]


def test_a_workspace_names_a_config_file_but_no_defconfig_which_would_run_its_kconfig():
    """A defconfig name runs the tree's Kconfig through kconfiglib, `$(shell,...)` macros included: a repository's
    settings asking for one would run its own commands when the workspace opens."""
    initial, _ = options.parse(USER)
    parsed, errors = options.parse_workspace({"kconfig": "x86_64_defconfig", "unbuilt": "hide"}, initial)
    assert parsed.kconfig == "" and parsed.unbuilt == "hide"
    assert len(errors) == 1 and "ignored kconfig 'x86_64_defconfig'" in errors[0]
    mine, _ = options.parse(USER | {"kconfig": "tinyconfig"})
    assert options.parse_workspace({"kconfig": "tinyconfig"}, mine) == (mine, [])  # the user's own: kept
    named, errors = options.parse_workspace({"kconfig": ".config"}, initial)
    assert named.kconfig == ".config" and errors == []
