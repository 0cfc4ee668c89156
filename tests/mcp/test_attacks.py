"""`k3lsp mcp` attacked through its arguments, as a steered agent would: every path argument tries to leave the
workspace (``..``, absolute, symlinks to a file and a folder outside, hidden files), a 10 MB patch text, an unknown
tool, malformed arguments and a smuggled endpoint. Each gets a clear error, nothing outside the workspace is read,
and the server goes on answering. No daemon: every refusal comes before one would be asked."""

from __future__ import annotations

import os

import pytest
from mcp import MCPError

from tests.mcp.client import answer, refusal, session
from tests.review import repos
from tests.support.daemon import nowhere

SECRET = "SECRET_TOKEN_42"
ESCAPES = {
    "../outside/secret.c": "'..' is not allowed",
    "sub/../../outside/secret.c": "'..' is not allowed",
    "{outside}/secret.c": "absolute paths are not allowed",
    "link.c": "resolves outside the workspace",
    "linked/secret.c": "resolves outside the workspace",
    ".git/config": "hidden files",
    "hard.c": "other hard links",
    "missing.c": "no such file",
}


def workspace(tmp_path):
    """A repository holding one C file, a symlink to a secret outside it, one to the secret's folder, and a hard
    link to the secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.c").write_text(f"int {SECRET};\n")
    root = repos.repository(tmp_path / "ws", {"a.c": "int f(void)\n{\n\treturn 0;\n}\n"})
    (root / "sub").mkdir()
    (root / "link.c").symlink_to(outside / "secret.c")
    (root / "linked").symlink_to(outside)
    os.link(outside / "secret.c", root / "hard.c")
    return root, outside


def calls(path: str) -> list[tuple[str, dict]]:
    """Every tool call that takes a path, with ``path``."""
    return [
        ("audit_file", {"path": path}),
        ("audit_file", {"path": path, "function": "f"}),
        ("explain", {"path": path, "fingerprint": "x"}),
        ("witnesses", {"path": path}),
    ]


async def test_no_path_argument_leaves_the_workspace(tmp_path):
    root, outside = workspace(tmp_path)
    said: list[str] = []
    async with session(root, nowhere(tmp_path), cache=tmp_path / "c") as client:
        for escape, why in ESCAPES.items():
            path = escape.format(outside=outside)
            for tool, args in calls(path):
                text = refusal(await client.call_tool(tool, args))
                assert why in text, (tool, path, text)
                said.append(text)
            with pytest.raises(MCPError) as refused:  # a resource's refusal is a protocol error
                await client.read_resource(f"k3lsp://findings/{path}")
            said.append(str(refused.value))
        status = answer(await client.call_tool("status", {}))
    assert not any(SECRET in text for text in said)
    assert status["counters"]["units"] == 0  # nothing was audited


async def test_a_10_mb_patch_text_is_refused_in_one_sentence(tmp_path):
    root, _ = workspace(tmp_path)
    patch = "--- a/a.c\n+++ b/a.c\n@@ -1,1 +1,1 @@\n" + "+x\n" * (5 * 1024 * 1024)
    async with session(root, nowhere(tmp_path), cache=tmp_path / "c") as client:
        text = refusal(await client.call_tool("review", {"patch": patch}))
        assert answer(await client.call_tool("status", {}))["counters"]["units"] == 0
    assert f"the patch text is {len(patch)} bytes, over the 2097152 a review takes here" in text


async def test_a_patch_text_naming_a_file_outside_the_workspace_is_not_applied(tmp_path):
    root, outside = workspace(tmp_path)
    said = []
    async with session(root, nowhere(tmp_path), cache=tmp_path / "c") as client:
        for name in ("../outside/secret.c", f"{outside}/secret.c", "link.c"):
            patch = f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-int {SECRET};\n+int x;\n"
            said.append(await client.call_tool("review", {"patch": patch}))
        assert answer(await client.call_tool("status", {}))["counters"]["units"] == 0
    for result in said:
        text = refusal(result)
        assert "nothing was audited: patch: not reviewed: " in text and SECRET not in text, text


async def test_a_file_the_settings_do_not_audit_is_refused_before_any_work(tmp_path):
    root, _ = workspace(tmp_path)
    (root / "notes.txt").write_text("int f(void) { return 0; }\n")
    async with session(root, nowhere(tmp_path), cache=tmp_path / "c") as client:
        text = refusal(await client.call_tool("audit_file", {"path": "notes.txt"}))
        assert answer(await client.call_tool("status", {}))["counters"]["units"] == 0
    assert "notes.txt is not a file the settings audit (include **/*.c, **/*.h; exclude " in text


async def test_with_no_daemon_an_audit_is_an_error_not_an_empty_list_of_findings(tmp_path):
    """An agent must not read "no findings" when nothing was audited."""
    root, _ = workspace(tmp_path)
    async with session(root, nowhere(tmp_path), cache=tmp_path / "c") as client:
        text = refusal(await client.call_tool("audit_file", {"path": "a.c"}))
    assert "1 of 1 units not audited: no daemon left" in text and "is the daemon running?" in text


async def test_audit_changes_names_what_it_cannot_read(tmp_path):
    """Below its repository's top, or against a base that is no commit: one sentence each, no work."""
    root, _ = workspace(tmp_path)
    async with session(root / "sub", nowhere(tmp_path), cache=tmp_path / "c") as client:
        below = refusal(await client.call_tool("audit_changes", {}))
    async with session(root, nowhere(tmp_path), cache=tmp_path / "c") as client:
        no_base = refusal(await client.call_tool("audit_changes", {"base": "no-such-base"}))
    assert f"needs the workspace root at its repository's top ({root})" in below
    assert "cannot read the changes against 'no-such-base'" in no_base


async def test_unknown_tools_malformed_arguments_and_a_smuggled_endpoint(tmp_path):
    root, _ = workspace(tmp_path)
    endpoint = nowhere(tmp_path)
    async with session(root, endpoint, cache=tmp_path / "c") as client:
        unknown = refusal(await client.call_tool("run_shell", {"command": "cat /etc/passwd"}))
        not_text = refusal(await client.call_tool("audit_file", {"path": 3}))
        missing = refusal(await client.call_tool("witnesses", {}))
        bad_rev = refusal(await client.call_tool("review", {"revision": "no-such-branch"}))
        neither = refusal(await client.call_tool("review", {}))
        smuggled = answer(await client.call_tool("status", {"endpoint": "tcp://198.51.100.1:5555", "key": "x"}))
    assert "run_shell" in unknown
    assert not_text == "audit_file: argument path: Input should be a valid string, not 3; see the tool's input schema"
    assert missing == "witnesses: argument path: Field required; see the tool's input schema"
    assert "no-such-branch" in bad_rev
    assert "give either revision" in neither
    assert smuggled["endpoint"] == endpoint  # the user's, never an argument's
