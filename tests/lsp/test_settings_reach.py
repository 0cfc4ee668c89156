"""Settings through a real server process: every key set reaches the server's effective settings (the status's
``settings``), and bad values give ONE message naming each bad key once, however many keys are bad and whether
they came in initializationOptions, in workspace/configuration or in both, while the valid keys still apply."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from tests.lsp import every_setting, scripted
from tests.support.lsp import editor

BAD = {"trigger": "never", "witnesses": ["cppcheck", "cpcheck"], "refuteFrom": "urgent", "bogus": 1}


@pytest.fixture
def root(tmp_path):
    return scripted.workspace(tmp_path)


async def test_every_setting_reaches_the_server(fake, root, tmp_path):
    endpoints = ["tcp://127.0.0.1:9", "tcp://127.0.0.1:10"]
    init = every_setting.CONNECTION | every_setting.WORKSPACE | {"endpoint": endpoints}
    async with editor(root, settings=init, configuration=every_setting.WORKSPACE, fake=fake,
                      cache_dir=tmp_path / "c") as ed:  # fmt: skip
        effective = (await ed.status())["settings"]
        errors = ed.shown(lsp.MessageType.Error)
    assert {k: effective[k] for k in init} == init
    assert errors == []


async def test_bad_values_are_one_message_naming_each_bad_key_once(fake, root, tmp_path):
    settings = BAD | {"minSeverity": "high"}
    async with editor(root, settings=settings, configuration=settings, fake=fake, cache_dir=tmp_path / "c") as ed:
        status = await ed.status()
        ed.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        await ed.status()  # a round trip after the change: a message it caused came before
        errors = ed.shown(lsp.MessageType.Error)
    assert len(errors) == 1, errors
    for key in ("'trigger'", "'witnesses'", "'refuteFrom'", "'bogus'"):
        assert errors[0].count(key) == 1, (key, errors[0])
    assert "'cpcheck'" in errors[0]
    effective = status["settings"]
    assert (effective["minSeverity"], effective["witnesses"], effective["trigger"]) == ("high", ["cppcheck"], "save")
