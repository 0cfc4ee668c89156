"""`k3-launch`: `mlx.launch` with the same arguments, without the two loops that keep a core busy while the
ranks run.

Why: `mlx.launch` (mlx 0.32) forwards its stdin to every rank. Each rank's output thread waits in `select` on
that rank's stdin pipe for writing, and a pipe is always writable, so the thread never sleeps; its input loop
waits on its own stdin for reading, and a stdin at EOF (launchd, `nohup`, `< /dev/null`) is always readable. On
a 2-core machine that is a core gone for as long as the pair runs, and a ring `all_sum` between the ranks 9 to
20 times slower (docs/benchmarks.md, `bench/pair_link.py`). No rank of ours reads stdin, so this launcher
forwards none: each rank's thread waits on the rank's output alone, and the launcher's own stdin is a pipe that
nobody writes to. Hostfiles, ssh, environment, signals and the exit code stay `mlx.launch`'s. The `select` it
replaces is a private part of mlx: backend/mlx_internals.py puts it there on the mlx versions it was written for
alone, and on others runs `mlx.launch` as it is.
"""

from __future__ import annotations

import os
import select

from backend import mlx_internals


def _select_reading(rlist: list, _wlist: list, xlist: list, timeout: float | None = None) -> tuple:
    """``select`` that never waits for writing: the launcher has nothing to write to the ranks."""
    readable, _, exceptional = select.select(rlist, [], xlist, timeout)
    return readable, [], exceptional


def main() -> None:
    read, _write = os.pipe()  # the write end stays open with this process: stdin never reaches EOF
    os.dup2(read, 0)
    mlx_internals.launch(_select_reading)


if __name__ == "__main__":
    main()
