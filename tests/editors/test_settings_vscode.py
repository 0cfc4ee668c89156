"""Every k3lsp setting set in the real VS Code workbench (code-server, Chromium) reaches the server, and bad values
are one notification that names each bad key once while the valid settings still apply.

One workbench session for all keys (tests/lsp/every_setting.py: a value other than the default for each key of
the schema): the connection settings in the remote (machine) settings, the others in the user settings; the bad
values go in the remote settings, which a remote window watches (code-server's is one). The server's effective
settings are read from the backend status the extension writes to its output channel. No daemon is needed:
nothing is audited (trigger manual) and the status answers without one.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.editors.test_vscode_workbench import DRIVER, QUIET, _drive, _require_workbench, _server_env
from tests.lsp import every_setting, scripted
from tests.support import workbench

SETTINGS_DRIVER = DRIVER.parent / "settings.js"
BAD = {"k3lsp.witnesses": ["cppcheck", "cpcheck"], "k3lsp.refuteFrom": "urgent", "k3lsp.trigger": "never"}


def _statuses(output: str) -> list[dict]:
    """Every backend status the extension wrote to its output channel, in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := output.find("k3 backend status:", at)) >= 0:
        at = output.index("{", at)
        status, at = decoder.raw_decode(output, at)
        found.append(status)
    return found


@pytest.mark.timeout(900)  # a cold first run also installs code-server, Node 24, Chromium and builds the .vsix
def test_every_setting_reaches_the_server_and_bad_ones_are_one_message(tmp_path):
    chromium = _require_workbench()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "demo.c").write_text(scripted.DEMO_C)
    endpoint = f"ipc://{tmp_path}/no-daemon.sock"
    machine = {"k3lsp.server.python": sys.executable, "k3lsp.endpoint": endpoint} | {
        f"k3lsp.{key}": value for key, value in every_setting.CONNECTION.items()
    }
    user = QUIET | {f"k3lsp.{key}": value for key, value in every_setting.WORKSPACE.items()}
    with workbench.code_server(ws, user, machine=machine, env=_server_env(tmp_path)) as server:
        driver = {
            "K3_SETTINGS": str(server.machine_settings),  # the remote settings, which a remote window watches
            "K3_BAD_SETTINGS": json.dumps(machine | BAD, indent=2),
        }
        seen, report, output, _ = _drive(SETTINGS_DRIVER, server, chromium, tmp_path, driver)

    good, bad = _statuses(output)[-2:]
    wanted = every_setting.CONNECTION | every_setting.WORKSPACE | {"endpoint": endpoint}
    assert {key: good["settings"][key] for key in wanted} == wanted, report
    assert seen["GOOD_ERRORS"] == [], report

    (told,) = seen["BAD_ERRORS"]  # one notification for three bad keys, read once at the change
    for key in ("'witnesses'", "'refuteFrom'", "'trigger'"):
        assert told.count(key) == 1, (key, told)
    assert "'cpcheck'" in told, told
    # The valid settings still apply: the known witness, and every other key as it was.
    assert bad["settings"]["witnesses"] == ["cppcheck"], bad["settings"]
    assert bad["settings"]["minSeverity"] == "high" and bad["settings"]["trigger"] == "save", bad["settings"]
