"""The VS Code extension's settings (editors/vscode/package.json) agree with what the server parses.

The extension sends its settings as they are, minus unset ones; a key the server does not know, an
enum value it rejects or a default that differs from the server's would only show up in a live
editor, so the manifest is checked against ``k3lsp.core.options`` here.
"""

import json
from pathlib import Path

import pytest

from k3lsp.core import options

MANIFEST = Path(__file__).resolve().parents[2] / "editors" / "vscode" / "package.json"
EXTENSION_ONLY = {"server.path", "server.python", "trace.server"}


def _properties() -> dict[str, dict]:
    props = json.loads(MANIFEST.read_text())["contributes"]["configuration"]["properties"]
    return {key.removeprefix("k3lsp."): spec for key, spec in props.items()}


def _server_properties() -> dict[str, dict]:
    return {key: spec for key, spec in _properties().items() if key not in EXTENSION_ONLY}


def _is_unset(value) -> bool:
    # What editors/vscode/src/config.ts leaves out: the server then applies its own default.
    return value is None or (isinstance(value, str) and not value.strip())


def test_every_server_setting_is_known_to_the_server():
    settings = {key: "x" for key in _server_properties()}
    _, errors = options.parse(settings)
    assert not [e for e in errors if "unknown k3lsp setting" in e], errors


def test_defaults_as_sent_parse_to_the_server_defaults():
    sent = {key: spec["default"] for key, spec in _server_properties().items() if not _is_unset(spec["default"])}
    parsed, errors = options.parse(sent)
    assert errors == []
    assert parsed == options.Options()


@pytest.mark.parametrize(
    ("key", "values"),
    [("trigger", options.TRIGGERS), ("minSeverity", options.SEVERITIES), ("thinkingEffort", options.THINKING_EFFORTS)],
)
def test_enums_match_the_server(key, values):
    assert tuple(_server_properties()[key]["enum"]) == values
    for value in values:
        assert options.parse({key: value})[1] == []


def test_the_settings_that_choose_a_program_daemon_or_keys_are_the_users_alone():
    """What the server reads from initializationOptions only (options.CONNECTION), and the server command, are
    `machine` settings (VS Code ignores a workspace's value) and restricted in untrusted workspaces."""
    manifest = json.loads(MANIFEST.read_text())
    user_only = {f"k3lsp.{key}" for key in (*options.CONNECTION, "server.path", "server.python")}
    scoped = {f"k3lsp.{key}" for key, spec in _properties().items() if spec.get("scope") == "machine"}
    assert scoped == user_only
    untrusted = manifest["capabilities"]["untrustedWorkspaces"]
    assert untrusted["supported"] == "limited" and set(untrusted["restrictedConfigurations"]) == user_only
