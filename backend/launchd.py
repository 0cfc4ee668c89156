"""launchd property lists for the Mac pair: the supervised pair on the first Mac, the wired-memory cap on both.

`k3-backend supervise --write-launchd DIR [--wired-limit-mb N] -- <mlx.launch command>` writes:

- ``com.k3lsp.pair.plist``, a LaunchAgent for the Mac that runs `mlx.launch` (rank 0's): it starts
  `k3-backend supervise -- <command>` at login and again only if the supervisor itself crashes. The supervisor
  restarts the pair; when it gives up (the same failure N times in a row) it exits 1 and launchd leaves it
  down, so the reason stays at the end of the log instead of scrolling away in a restart loop.
- ``com.k3lsp.wired-limit.plist``, a LaunchDaemon for **both** Macs: ``sysctl iogpu.wired_limit_mb=N`` at
  boot (the setting does not survive a reboot, and a missed step means swapping or a failed load).

hostfiles/README.md says where they go and how to load them.
"""

from __future__ import annotations

import plistlib
import sys
from pathlib import Path

PAIR_LABEL = "com.k3lsp.pair"
WIRED_LABEL = "com.k3lsp.wired-limit"


def pair_job(command: list[str], *, workdir: Path, log: Path, program: Path | None = None) -> dict:
    """The LaunchAgent that supervises ``command`` (absolute paths: launchd has no venv on its PATH)."""
    program = program or Path(sys.executable).parent / "k3-backend"
    return {
        "Label": PAIR_LABEL,
        "ProgramArguments": [str(program), "supervise", "--", *command],
        "WorkingDirectory": str(workdir),
        "RunAtLoad": True,
        "KeepAlive": {"Crashed": True},  # not after the supervisor gave up on purpose (exit 1)
        "ProcessType": "Interactive",  # no background throttling of a server the editors wait for
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
    }


def wired_limit_job(megabytes: int) -> dict:
    """The LaunchDaemon (root) that raises the GPU wired-memory cap at every boot."""
    return {
        "Label": WIRED_LABEL,
        "ProgramArguments": ["/usr/sbin/sysctl", f"iogpu.wired_limit_mb={megabytes}"],
        "RunAtLoad": True,
    }


def write(directory: Path, command: list[str], wired_limit_mb: int | None) -> list[Path]:
    """Write the property lists to ``directory``; the paths written."""
    if wired_limit_mb is not None and wired_limit_mb < 1:
        raise ValueError("--wired-limit-mb must be a positive number of megabytes")
    directory.mkdir(parents=True, exist_ok=True)
    jobs = {PAIR_LABEL: pair_job(command, workdir=Path.cwd(), log=Path.home() / "Library/Logs/k3lsp-pair.log")}
    if wired_limit_mb is not None:
        jobs[WIRED_LABEL] = wired_limit_job(wired_limit_mb)
    paths = []
    for label, job in jobs.items():
        path = directory / f"{label}.plist"
        path.write_bytes(plistlib.dumps(job))
        paths.append(path)
    return paths
