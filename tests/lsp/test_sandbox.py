"""sandbox: the model's workspace tools stay read-only, inside the root, and bounded."""

import os
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lsp.tools import confine, sandbox, search
from k3lsp.wire import keys
from tests.lsp.conftest import EXAMPLES


@pytest.fixture(autouse=True)
def index_dir(tmp_path, monkeypatch):
    """Symbol indexes go beside a cache of the test's own, not the user's."""
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))


@pytest.fixture
def ws(tmp_path, examples):
    """A workspace with the demo corpus, a secret outside it, and hostile links inside it."""
    root = tmp_path / "ws"
    shutil.copytree(examples, root / "drivers")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "id_rsa.c").write_text("int stolen_key = 42;\n")
    (root / "out_file.c").symlink_to(outside / "id_rsa.c")
    (root / "out_dir").symlink_to(outside)
    (root / "loop_a").symlink_to(root / "loop_b")
    (root / "loop_b").symlink_to(root / "loop_a")
    (root / "inside_link.c").symlink_to(root / "drivers" / "k3demo.h")
    (root / "blob.c").write_bytes(b"\x7fELF\x00\x00binary")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("int stolen_key = 43;\n")
    (root / ".env").write_text("stolen_key=44\n")
    (root / "innocent.c").symlink_to(root / ".ssh" / "id_rsa")
    return root


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../secret/id_rsa.c", "'..' is not allowed"),
        ("drivers/../../secret/id_rsa.c", "'..' is not allowed"),
        ("/etc/passwd", "absolute paths are not allowed"),
        ("C:\\Windows\\win.ini", "absolute paths are not allowed"),
        ("out_file.c", "resolves outside the workspace"),
        ("out_dir/id_rsa.c", "resolves outside the workspace"),
        ("loop_a", "cannot be resolved"),
        ("missing.c", "no such file"),
        ("drivers", "not a regular file"),
        ("blob.c", "binary file"),
        (".ssh/id_rsa", "hidden files and directories"),
        ("./.env", "hidden files and directories"),
        ("drivers/../.env", "'..' is not allowed"),
        ("innocent.c", "resolves to a hidden file"),
        ("", "non-empty"),
        ("a\0b", "NUL"),
    ],
)
def test_read_lines_refuses_escapes_and_bad_files(ws, path, why):
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": path, "start": 1, "end": 3})
    assert not ok and why in text
    assert "stolen_key" not in text


def test_read_lines_reads_numbered_lines_inside_the_workspace(ws):
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": "drivers/k3demo_chardev.c", "start": 22, "end": 23})
    assert ok
    assert text.split("\n") == [
        "drivers/k3demo_chardev.c:22-23 of 97 lines",
        "    22  static long k3demo_write_msg(void __user *argp)",
        "    23  {",
    ]
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": "inside_link.c", "start": 1, "end": 1})
    assert ok and "SPDX" in text  # a symlink that stays inside is fine
    assert sandbox.run_tool(ws, "read_lines", {"path": "drivers/k3demo.h", "start": 500, "end": 501}) == (
        False,
        "read_lines: drivers/k3demo.h has only 33 lines",
    )
    assert not sandbox.run_tool(ws, "read_lines", {"path": "drivers/k3demo.h", "start": 5, "end": 2})[0]


def test_results_are_size_limited(ws, monkeypatch):
    (ws / "big.c").write_text("".join(f"int v{i} = {i}; /* {'x' * 100} */\n" for i in range(5000)))
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": "big.c", "start": 1, "end": 5000})
    assert ok and len(text) <= sandbox.MAX_RESULT_CHARS + 200
    assert "ask for" in text.split("\n")[-1]
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": r"int v\d+"})
    assert ok and re.match(r"[\d,]+\+ matching lines", text)  # "+": there were more
    assert len(text) <= sandbox.MAX_RESULT_CHARS + 200 and len(text.split("\n")) <= sandbox.MAX_RESULT_LINES + 3
    monkeypatch.setattr(confine, "MAX_FILE_BYTES", 1000)
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": "big.c", "start": 1, "end": 2})
    assert not ok and "over the 1000-byte limit" in text


@pytest.mark.skipif(shutil.which("ctags") is None, reason="needs universal-ctags: apt-get install universal-ctags")
def test_find_definition_finds_functions_types_macros_and_globals(ws):
    cases = {
        "k3demo_alloc_table": "drivers/k3demo_syscalls.c:25-37 (function)",
        "k3demo_msg": "drivers/k3demo.h:17-21 (struct)",
        "K3DEMO_NR_SLOTS": "drivers/k3demo.h:15-15 (macro)",
        "k3demo_fops": "drivers/k3demo_chardev.c:73-77 (variable)",
    }
    for symbol, where in cases.items():
        ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": symbol})
        assert ok and text.split("\n")[1] == where, (symbol, text)
        assert text.startswith(f"1 definition of {symbol}, from the symbol index of ")
    ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": "k3demo_session_register"})
    lines = text.split("\n")
    assert lines[1] == "drivers/k3demo_session.c:63-66 (function)"  # the definition before the prototype
    assert "drivers/k3demo_session.c:31-31 (prototype)" in lines
    ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": "stolen_key"})
    assert ok and re.fullmatch(
        r"no definition of stolen_key in the symbol index of \d+ files \(.*\), updated \d+ s ago", text
    )
    assert not sandbox.run_tool(ws, "find_definition", {"symbol": "a b; rm -rf"})[0]


def test_grep_regex_fallbacks_and_confinement(ws):
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": r"copy_from_user\(.*hdr\.len"})
    assert ok and text.split("\n")[1].startswith("drivers/k3demo_chardev.c:33: if (copy_from_user(slot->buf")
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "copy_from_user(", "path": "drivers/k3demo_syscalls.c"})
    assert ok and "invalid regex" in text and "drivers/k3demo_syscalls.c:54:" in text
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": r"(\w+)+;$", "path": "drivers/k3demo.h"})
    assert ok and "(regex)" in text  # nested quantifiers are fine where they finish
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "stolen_key"})
    assert ok and text.startswith("0 matching lines")  # no symlink out of the workspace, no hidden file
    assert not sandbox.run_tool(ws, "grep", {"pattern": "stolen_key", "path": ".ssh"})[0]
    assert not sandbox.run_tool(ws, "grep", {"pattern": "x", "path": "out_dir"})[0]
    assert not sandbox.run_tool(ws, "grep", {"pattern": "x", "path": "../secret"})[0]
    assert not sandbox.run_tool(ws, "grep", {"pattern": ""})[0]


@pytest.mark.parametrize("pattern", ["(a|aa)+$", "((a+))+$", "(a+)+$"])
def test_grep_stops_a_catastrophic_regex_by_killing_its_child(ws, monkeypatch, pattern):
    """ripgrep's regexes never backtrack; without it, one line can keep `re` busy for ever without releasing
    the GIL: only a killed child process stops it."""
    (ws / "drivers" / "aaa.c").write_text("/* " + "a" * 64 + "! */\n")
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": pattern, "path": "drivers/aaa.c"})
    assert ok and text.startswith("0 matching lines") and "with ripgrep" in text  # no backtracking there
    monkeypatch.setattr(search, "ripgrep", lambda: None)  # without ripgrep, Python's re searches
    monkeypatch.setattr(sandbox, "GREP_SECONDS", 1.5)  # the bound under test, shortened for the test's sake
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": pattern, "path": "drivers/aaa.c"})
    assert not ok and "was stopped (catastrophic backtracking?)" in text
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": pattern, "path": "drivers/k3demo.h"})
    assert ok and text.startswith("0 matching lines")  # the same pattern on ordinary code is answered
    assert "with a pure-Python search (ripgrep was not found" in text


def test_special_files_are_refused_not_read(ws):
    os.mkfifo(ws / "drivers" / "pipe.c")  # reading a FIFO would block the server forever
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "k3demo_ioctl"})
    assert ok and "drivers/k3demo_chardev.c:59:" in text
    assert sandbox.run_tool(ws, "read_lines", {"path": "drivers/pipe.c", "start": 1, "end": 1}) == (
        False,
        "read_lines: drivers/pipe.c: not a regular file",
    )
    assert sandbox.run_tool(ws, "find_definition", {"symbol": "k3demo_ioctl"})[0]


def test_dispatch_errors_are_answers(ws):
    assert sandbox.run_tool(ws, "rm", {}) == (
        False,
        "unknown tool 'rm'; available: find_definition, find_references, grep, read_lines",
    )
    assert sandbox.run_tool(ws, "grep", ["x"]) == (False, "grep: arguments must be an object")
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "x", "cmd": "sh"})
    assert not ok and "unknown arguments ['cmd']" in text
    assert not sandbox.run_tool(ws, "read_lines", {"path": "drivers/k3demo.h", "start": "1", "end": 2})[0]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(["read_lines", "find_definition", "find_references", "grep", "nope"]),
    args=st.dictionaries(st.sampled_from(["path", "start", "end", "symbol", "pattern", "x"]), json_values, max_size=4),
)
def test_run_tool_never_raises(name, args):
    ok, text = sandbox.run_tool(EXAMPLES, name, args)
    assert isinstance(ok, bool) and isinstance(text, str) and len(text) <= sandbox.MAX_RESULT_CHARS + 1000


def test_searches_stop_at_the_time_limit(ws, monkeypatch):
    monkeypatch.setattr(sandbox, "SEARCH_SECONDS", -1.0)  # already past the deadline: stop at once
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "k3demo"})
    assert ok and "stopped at the -1 s deadline before the search was complete, so more may match" in text
    ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": "k3demo_ioctl"})  # the index is not built yet
    assert ok and text.startswith("no definition of k3demo_ioctl in the symbol index, still being built: ")
    assert text.endswith("files indexed so far: ask again shortly, or grep for it")


def test_a_hard_link_to_a_file_outside_is_out_of_every_tools_reach(ws, tmp_path):
    outside = tmp_path / "secret" / "creds.c"
    outside.write_text("int stolen_key = 45;\n")
    os.link(outside, ws / "drivers" / "harmless.c")  # no symlink to see: the same file under a second name
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": "drivers/harmless.c", "start": 1, "end": 3})
    assert not ok and "has other hard links" in text and "stolen_key" not in text
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "stolen_key"})
    assert ok and text.startswith("0 matching lines")
    ok, text = sandbox.run_tool(ws, "find_definition", {"symbol": "stolen_key"})
    assert "no definition" in text


def test_a_nul_after_the_first_8_kib_still_makes_a_binary_file(ws):
    (ws / "drivers" / "late.c").write_bytes(b"int plain_text;\n" * 1000 + b"\0\x7fELF stolen_key")
    ok, text = sandbox.run_tool(ws, "read_lines", {"path": "drivers/late.c", "start": 1, "end": 2})
    assert not ok and "binary file" in text
    ok, text = sandbox.run_tool(ws, "grep", {"pattern": "plain_text|stolen_key", "path": "drivers/late.c"})
    assert ok and text.startswith("0 matching lines")


def test_a_workspace_at_the_home_folder_keeps_keys_and_other_secrets_out_of_reach(tmp_path, monkeypatch):
    """Home as the workspace: the key directories (not hidden on macOS: ~/Library/Application Support/...),
    the result cache, keychains and private keys lying around are refused by name and place."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "conf"))  # a config dir without a dot, as on macOS
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "caches"))
    monkeypatch.delenv("K3LSP_CACHE_DIR", raising=False)
    keys.init_client(keys.default_dir("k3lsp"), "alice")
    keys.init_server(keys.default_dir("k3-backend"))
    (home / "caches" / "k3lsp").mkdir(parents=True)
    (home / "caches" / "k3lsp" / "notes.c").write_text("int cached_result;\n")
    (home / "Library" / "Keychains").mkdir(parents=True)
    (home / "Library" / "Keychains" / "login.txt").write_text("stolen_key\n")
    (home / "work").mkdir()
    (home / "work" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY----- stolen_key\n")
    (home / "work" / "server.pem").write_text("-----BEGIN PRIVATE KEY----- stolen_key\n")
    (home / "work" / "main.c").write_text("int main(void) { return 0; }\n")
    secrets = [
        "conf/k3lsp/keys/alice.key_secret",
        "conf/k3lsp/keys/alice.key",
        "conf/k3-backend/keys/server.key",
        "caches/k3lsp/notes.c",
        "Library/Keychains/login.txt",
        "work/id_ed25519",
        "work/server.pem",
    ]
    for path in secrets:
        ok, text = sandbox.run_tool(home, "read_lines", {"path": path, "start": 1, "end": 3})
        assert not ok and "secrets are not available" in text, (path, text)
    (home / "Library" / "Mobile Documents").mkdir()  # iCloud Drive: code may live there
    (home / "Library" / "Mobile Documents" / "icloud.c").write_text("int synced;\n")
    assert sandbox.run_tool(home, "read_lines", {"path": "Library/Mobile Documents/icloud.c", "start": 1, "end": 1})[0]
    ok, text = sandbox.run_tool(home, "grep", {"pattern": "."})
    assert ok and "work/main.c:1:" in text
    assert not any(path in text for path in secrets) and "stolen_key" not in text and "BEGIN" not in text
    ok, text = sandbox.run_tool(home, "find_definition", {"symbol": "cached_result"})
    assert "no definition" in text
