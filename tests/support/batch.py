"""Running `k3lsp` subcommands as real processes for the batch and status tests, and reading their results."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from k3lsp.wire.cache import FILE_NAME, ResultCache

TIMEOUT = 180


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    """``tmp_path/proj`` holding ``files`` (name -> text): what `k3lsp audit proj` run in ``tmp_path`` audits."""
    root = tmp_path / "proj"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def k3lsp_env(cache: Path) -> dict[str, str]:
    """The test process's environment with a private result cache."""
    return os.environ | {"K3LSP_CACHE_DIR": str(cache)}


def k3lsp(
    *args: str, cache: Path, cwd: Path, timeout: float = TIMEOUT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m k3lsp.cli ARGS` to completion (bounded), output captured as text; ``env`` adds variables."""
    cmd = [sys.executable, "-m", "k3lsp.cli", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=k3lsp_env(cache) | (env or {}), cwd=cwd
    )


def start_k3lsp(*args: str, cache: Path, cwd: Path) -> subprocess.Popen:
    """The same, started in the background (the caller ends it by PID)."""
    cmd = [sys.executable, "-m", "k3lsp.cli", *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=k3lsp_env(cache), cwd=cwd
    )


async def run_k3lsp(*args: str, cache: Path, cwd: Path, env: dict | None = None) -> tuple[int, str, str]:
    """`k3lsp ARGS` to completion (bounded) without blocking the event loop (a scripted daemon may answer on
    it): (exit status, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "k3lsp.cli",
        *args,
        cwd=cwd,
        env=k3lsp_env(cache) | (env or {}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out.decode(), err.decode()


def stats(result: subprocess.CompletedProcess | str) -> dict:
    """The `stats` of a `--format json` run."""
    out = result if isinstance(result, str) else result.stdout
    return json.loads(out)["stats"]


def cached_units(cache: Path) -> int:
    """How many unit results the cache directory holds (every model id)."""
    store = ResultCache(cache / FILE_NAME)
    try:
        return store.stats()["entries"]
    finally:
        store.close()
