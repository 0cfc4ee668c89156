"""Each rank's own exit code, written where `k3-backend supervise` reads it.

`mlx.launch` exits 0 whatever its ranks return, so a supervisor cannot learn from it how the pair ended.
`supervise` names a directory in K3_EXIT_STATUS_DIR (through `mlx.launch --env`, which exports it on every
host), and `serve` writes ``rank-N.json`` there as it exits, from every exit path (``os._exit`` included). A
rank that writes nothing was killed by a signal or runs on another host: the supervisor then falls back on
the launcher's own "Node with rank N exited with code C" line.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

ENV = "K3_EXIT_STATUS_DIR"
RANK_FAILURE_EXIT = 3  # serve's exit code when a rank of the pair failed (a supervisor restarts the pair)


def record(code: int) -> None:
    """Write this rank's exit code, if a supervisor asked for it; never raises (the process is ending)."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    rank = os.environ.get("MLX_RANK", "0")
    path = Path(directory) / f"rank-{rank}.json"
    with contextlib.suppress(OSError, ValueError):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rank": int(rank), "code": int(code), "pid": os.getpid()}))
        tmp.replace(path)


def read(directory: Path) -> dict[int, int]:
    """rank -> exit code, for every rank that wrote one; malformed files are ignored."""
    codes: dict[int, int] = {}
    for path in sorted(directory.glob("rank-*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(path.read_text())
            codes[int(data["rank"])] = int(data["code"])
    return codes
