"""Every server setting set in Neovim 0.11's setup{} reaches the server, and bad ones are one message each way.

Real Neovim (headless) runs tests/editors/nvim/settings.lua with the plugin from the work tree: setup{} with a
value other than the default for every key of the schema (tests/lsp/every_setting.py) starts the real `k3lsp`
server, whose `k3lsp.status` reports its effective settings; no daemon is needed (nothing is audited).
"""

from __future__ import annotations

import json
import re

from k3lsp.core import options
from tests.editors.test_nvim import NVIM, pytestmark, run_scenario, values  # noqa: F401 (the skip mark)
from tests.lsp import every_setting


def test_every_setting_reaches_the_server_and_bad_ones_are_one_message(tmp_path, unused_tcp_port):
    workspace = tmp_path / "project"
    (workspace / ".git").mkdir(parents=True)
    (workspace / "main.c").write_text("int main(void)\n{\n\treturn 0;\n}\n")
    endpoint = f"tcp://127.0.0.1:{unused_tcp_port}"
    wire = every_setting.CONNECTION | every_setting.WORKSPACE | {"endpoint": endpoint}
    lua = {options.BY_KEY[key].field: value for key, value in wire.items()}
    (tmp_path / "settings.json").write_text(json.dumps(lua))  # the scenario reads it beside its workspace
    lines = run_scenario("settings.lua", workspace, endpoint)
    assert values(lines, "TIMEOUT") == [], lines

    effective = values(lines, "EVERY")[0]
    assert {key: effective[key] for key in wire} == wire
    assert values(lines, "EVERY_MESSAGES") == [[]]

    rejected = values(lines, "REJECT")[0]  # setup{} names every wrong option in one error
    assert rejected["ok"] is False and rejected["err"].startswith("k3lsp.setup: "), rejected
    for option in ("trigger", "refute_from", "witnesses"):
        assert len(re.findall(rf"\b{option} must\b", rejected["err"])) == 1, (option, rejected)

    bad = values(lines, "BAD")[0]  # the unknown witness is left out; the known one and min_severity apply
    assert (bad["witnesses"], bad["minSeverity"]) == (["cppcheck"], "high"), bad
    (told,) = values(lines, "BAD_MESSAGES")[0]
    assert told["type"] == 1 and "'cpcheck'" in told["message"] and told["message"].count("'witnesses'") == 1, told
