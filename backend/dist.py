"""The few things every multi-rank command needs from `mx.distributed`, in one place.

`share` moves a Python object from rank 0 to every rank with two `all_sum`s (its size, then its pickled
bytes, the other ranks contributing zeros), as `mlx_lm.server` does: ring, jaccl and MPI all have
`all_sum`, and the objects moved (one scheduling step's commands, a doctor probe) are small.

`rank0_host` is the address rank 0 is reached at by its peers, from what `mlx.launch` put in the
environment; side channels (the scheduler's wake-up socket) bind there and nowhere else.

`deadline` is a watchdog for calls that may block forever: a ring collective whose peer never started
or hangs does not time out on its own (and spins a core while it waits), so the only bounded way out
is to print why and end the process.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import sys
import threading
from collections.abc import Iterator

import mlx.core as mx


def share(obj, group: mx.distributed.Group):
    """Rank 0's `obj` on every rank (the others pass anything, usually None)."""
    if group.size() == 1:
        return obj
    if group.rank() == 0:
        data = mx.array(bytearray(pickle.dumps(obj)), dtype=mx.uint8)
        mx.eval(mx.distributed.all_sum(data.size, group=group, stream=mx.cpu))
        mx.eval(mx.distributed.all_sum(data, group=group, stream=mx.cpu))
        return obj
    size = mx.distributed.all_sum(0, group=group, stream=mx.cpu).item()
    data = mx.distributed.all_sum(mx.zeros(size, dtype=mx.uint8), group=group, stream=mx.cpu)
    return pickle.loads(bytes(data))


def rank0_host(env: dict[str, str] | None = None) -> str:
    """The IP rank 0 has in this launch: the ring hostfile's first address, the jaccl coordinator, or loopback."""
    env = os.environ if env is None else env
    coordinator = env.get("MLX_JACCL_COORDINATOR", "")
    if coordinator:
        return coordinator.rsplit(":", 1)[0]
    path = env.get("MLX_HOSTFILE", "")
    if path:
        with contextlib.suppress(OSError, ValueError, IndexError, TypeError, AttributeError):
            with open(path) as f:
                hosts = json.load(f)
            return str(hosts[0][0]).rsplit(":", 1)[0]
    return "127.0.0.1"


@contextlib.contextmanager
def deadline(seconds: float, message: str, code: int = 1) -> Iterator[None]:
    """Run the block; if it has not finished after `seconds`, print `message` and end the process with `code`."""
    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            print(message, file=sys.stderr, flush=True)
            os._exit(code)

    watcher = threading.Thread(target=watch, name="deadline", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
