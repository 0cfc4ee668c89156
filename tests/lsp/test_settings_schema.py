"""One settings schema (k3lsp.core.options.SETTINGS) reaches every editor: VS Code's manifest and Neovim's option
table are what k3lsp.core.schema renders from it, Neovim's :help and README's table name every key, and a bad
value is one message that names each bad key once while the valid keys (and the valid witnesses) still apply."""

from __future__ import annotations

import json
import re
from pathlib import Path

from k3lsp.core import options, schema

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "run `python -m k3lsp.core.schema` and commit what it writes"


def test_vscode_declares_every_server_setting_as_the_schema_renders_it():
    manifest = json.loads(schema.MANIFEST.read_text())
    declared = manifest["contributes"]["configuration"]["properties"]
    assert {f"k3lsp.{s.key}" for s in options.SETTINGS} <= set(declared), REGENERATE
    assert manifest == schema.vscode_manifest(json.loads(schema.MANIFEST.read_text())), REGENERATE


def test_neovim_validates_against_the_table_the_schema_renders():
    assert schema.NVIM_TABLE.read_text() == schema.nvim_table(), REGENERATE


def test_neovim_help_names_every_option_and_its_server_key():
    help_text = (REPO / "editors" / "nvim" / "doc" / "k3lsp.txt").read_text()
    options_section = help_text.split("*k3lsp-options*")[1].split("*k3lsp-commands*")[0]
    listed = set(re.findall(r"^  (\w+)\b", options_section, flags=re.M))
    missing = {s.field for s in options.SETTINGS} - listed
    assert not missing, f"doc/k3lsp.txt's options do not list {sorted(missing)}"
    for s in options.SETTINGS:
        assert f"`{s.key}`" in options_section, s.key


def test_one_unknown_witness_is_named_and_the_others_still_run():
    opts, errors = options.parse({"witnesses": ["cppcheck", "cpcheck", "sparse"]})
    assert opts.witnesses == ("cppcheck", "sparse")
    assert len(errors) == 1 and "'cpcheck'" in errors[0] and "'witnesses'" in errors[0], errors


def test_bad_values_are_one_message_naming_each_bad_key_once_and_the_valid_keys_apply():
    raw = {"trigger": "never", "witnesses": ["gcc", "nope"], "refuteFrom": "urgent", "minSeverity": "high", "x": 1}
    opts, errors = options.parse(raw)
    assert (opts.trigger, opts.min_severity, opts.witnesses, opts.refute_from) == ("save", "high", ("gcc",), "medium")
    message = options.summary(errors + errors)  # the same errors from initializationOptions and the workspace
    for key in ("'trigger'", "'witnesses'", "'refuteFrom'", "'x'"):
        assert message.count(key) == 1, (key, message)
    assert "'minSeverity'" not in message and "'nope'" in message and "'never'" in message


def test_the_effective_settings_are_what_was_set():
    raw = {
        "endpoint": ["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"], "witnesses": ["clang"], "refute": True,
        "kernelMacros": {"loops": ["k3_walk_*"]}, "maxWorkspaceFiles": 7, "scope": "changed", "baseRef": "main",
    }  # fmt: skip
    opts, errors = options.parse(raw)
    assert errors == []
    effective = options.effective(opts)
    assert {k: effective[k] for k in raw} == raw
    assert options.parse(effective) == (opts, [])  # what the status shows, sent back, is the same settings


def test_each_editors_readme_names_every_setting():
    vscode = (REPO / "editors" / "vscode" / "README.md").read_text()
    nvim = (REPO / "editors" / "nvim" / "README.md").read_text()
    for s in options.SETTINGS:
        assert f"`k3lsp.{s.key}`" in vscode, f"editors/vscode/README.md does not list k3lsp.{s.key}"
        assert re.search(rf"`{s.field}`", nvim), f"editors/nvim/README.md does not list {s.field}"
