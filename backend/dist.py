"""The few things every multi-rank command needs from `mx.distributed`, in one place.

`exchange` puts every rank's Python object on every rank with ONE `all_sum` (ring, jaccl and MPI all have
it): each rank writes its pickled object into its own fixed-size slot of a zero buffer, so the sum is every
slot at once. An object too large for its slot costs a second `all_sum`, of exactly the oversized objects,
which every rank knows about from the first. The scheduler exchanges each engine step this way (commands
from rank 0, every rank's outcome of its last step), so a step costs one collective, not the two (size,
then bytes) of `mlx_lm.server`'s sharing. `share` (rank 0's object) and `gather` (all of them) are
exchanges too.

`rank0_host` is the address rank 0 is reached at by its peers, from what `mlx.launch` put in the
environment; side channels (the scheduler's wake-up socket) bind there and nowhere else.

`load_model` loads a checkpoint whole on one rank, or this rank's tensor-parallel shard on several: the
one way `serve`, `fidelity` and `doctor` load a model, so all three shard it and trust its code the same
way. A checkpoint whose tokenizer is Python shipped with it (the release's `auto_map`) runs that code only
with `trust_remote_code` (`--trust-remote-code`); without it the load fails at once with a message naming
the flag. transformers is always told explicitly, so it never asks its interactive `[y/N]` question (which
reads stdin and prints on stdout).

`deadline` is a watchdog for calls that may block forever: a ring init or collective whose peer never
started or hangs does not time out on its own, so the only bounded way out is to print why and end the
process.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import numpy as np

SLOT_BYTES = 16 * 1024  # per rank: a step's commands with a few thousand prompt tokens fit in one collective


def exchange(obj, group: mx.distributed.Group, slot: int = SLOT_BYTES) -> tuple[list, int]:
    """(every rank's ``obj`` in rank order, the number of collectives it took: 1, or 2 if one did not fit)."""
    if group.size() == 1:
        return [obj], 0
    size, rank = group.size(), group.rank()
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    buf = np.zeros(size * slot, dtype=np.uint8)
    buf[rank * slot : rank * slot + 4] = np.frombuffer(len(data).to_bytes(4, "little"), dtype=np.uint8)
    if len(data) <= slot - 4:
        buf[rank * slot + 4 : rank * slot + 4 + len(data)] = data
    summed = _all_sum(buf, group)
    lengths = [int.from_bytes(summed[r * slot : r * slot + 4].tobytes(), "little") for r in range(size)]
    out = [
        pickle.loads(summed[r * slot + 4 : r * slot + 4 + n].tobytes()) if n <= slot - 4 else None
        for r, n in enumerate(lengths)
    ]
    big = [r for r, n in enumerate(lengths) if n > slot - 4]
    if not big:
        return out, 1
    offsets = dict(zip(big, itertools.accumulate([0, *(lengths[r] for r in big)]), strict=False))
    extra = np.zeros(sum(lengths[r] for r in big), dtype=np.uint8)
    if rank in offsets:
        extra[offsets[rank] : offsets[rank] + len(data)] = data
    summed = _all_sum(extra, group)
    for r in big:
        out[r] = pickle.loads(summed[offsets[r] : offsets[r] + lengths[r]].tobytes())
    return out, 2


def _all_sum(buf: np.ndarray, group: mx.distributed.Group) -> np.ndarray:
    return np.array(mx.distributed.all_sum(mx.array(buf), group=group, stream=mx.cpu))


LINK_ERROR_TAGS = ("[ring]", "[jaccl]", "[mpi]", "[nccl]")  # how MLX's distributed backends start their errors


def link_error(exc: BaseException) -> bool:
    """Whether a collective failed (a peer is gone, the link broke), not the computation around it."""
    return isinstance(exc, RuntimeError) and str(exc).startswith(LINK_ERROR_TAGS)


def share(obj, group: mx.distributed.Group):
    """Rank 0's `obj` on every rank (the others pass anything, usually None)."""
    return exchange(obj if group.rank() == 0 else None, group)[0][0]


def gather(obj, group: mx.distributed.Group) -> list:
    """Every rank's `obj`, in rank order, on every rank (doctor's per-rank reports)."""
    return exchange(obj, group)[0]


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


_WATCHDOG = """
import os, sys, time
time.sleep(float(sys.argv[1]))
try:
    os.kill(int(sys.argv[2]), 0)
except OSError:
    sys.exit(0)
print(sys.argv[3], file=sys.stderr, flush=True)
os.kill(int(sys.argv[2]), 9)
"""


@contextlib.contextmanager
def deadline(seconds: float, message: str) -> Iterator[None]:
    """Run the block; if it has not finished after `seconds`, print `message` and kill this process.

    The watchdog is a separate process, not a thread: `mx.distributed.init()` holds the GIL while a ring
    init waits for a missing peer, so no Python thread of ours would ever run.
    """
    watcher = subprocess.Popen(
        [sys.executable, "-S", "-c", _WATCHDOG, str(seconds), str(os.getpid()), message], stdin=subprocess.DEVNULL
    )
    try:
        yield
    finally:
        watcher.kill()
        watcher.wait()


TRUST_FLAG = "--trust-remote-code"


class RemoteCodeError(ValueError):
    """The checkpoint needs its own Python code to load, and it was not trusted."""


def remote_code(path: str | os.PathLike) -> str | None:
    """What Python code a local checkpoint directory asks to run (its tokenizer's `auto_map`, a custom model
    file), or None; None too for a hub repo id, whose files are not here yet."""
    wants = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            auto_map = json.load(f).get("auto_map")
        if auto_map:
            wants.append("its tokenizer class (auto_map in tokenizer_config.json)")
    with contextlib.suppress(OSError, ValueError, AttributeError):
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            model_file = json.load(f).get("model_file")
        if model_file:
            wants.append(f"its model file {model_file}")
    return " and ".join(wants) or None


def check_trust(path: str, trust_remote_code: bool) -> None:
    """Raise RemoteCodeError, naming the flag, when the checkpoint ships code that is not trusted."""
    wants = None if trust_remote_code else remote_code(path)
    if wants:
        raise RemoteCodeError(
            f"{path} needs to run Python code shipped with it ({wants}); pass {TRUST_FLAG} if you trust this checkpoint"
        )


def load_model(
    path: str,
    group: mx.distributed.Group | None = None,
    *,
    trust_remote_code: bool = False,
    progress=None,
    pace: float = 0.0,
):
    """(model, tokenizer): the checkpoint whole on one rank, this rank's tensor-parallel shard over ``group``
    when it has several; read part by part into ``progress`` (a `backend.loading.LoadProgress`) if given.

    Raises RemoteCodeError before reading any weight when the checkpoint ships code and ``trust_remote_code``
    is off (and when transformers finds such code in a hub checkpoint).
    """
    from backend import loading, mlx_internals

    check_trust(path, trust_remote_code)
    try:
        return loading.load(
            mlx_internals.checkpoint_dir(path),
            group,
            {"trust_remote_code": trust_remote_code},
            trust_remote_code=trust_remote_code,
            progress=progress,
            pace=pace,
        )
    except ValueError as exc:
        if not trust_remote_code and "trust_remote_code" in str(exc):
            raise RemoteCodeError(
                f"{path} needs to run Python code shipped with it; pass {TRUST_FLAG} if you trust this checkpoint"
            ) from exc
        raise


def load_tokenizer(path: str, *, trust_remote_code: bool = False):
    """The checkpoint's tokenizer alone (no weights), trusted as ``load_model`` trusts it."""
    from mlx_lm.utils import load_tokenizer as mlx_load_tokenizer

    check_trust(path, trust_remote_code)
    return mlx_load_tokenizer(Path(path), {"trust_remote_code": trust_remote_code})
