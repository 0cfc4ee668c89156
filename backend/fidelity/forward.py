"""Loading a model on one process or as tensor-parallel ranks, and teacher-forced log-probs in chunks.

Under `mlx.launch` every rank loads its shard with `mlx_lm.utils.sharded_load`, exactly like `serve`,
and runs the same forward passes; the head is replicated, so every rank ends with the same log-probs
and only rank 0 reads inputs, writes the BASE and prints. Rank 0 shares what it read with `backend.dist.share`.

Memory stays bounded for long windows and a 163,840-token vocabulary: a window is fed `chunk` tokens
at a time through one prompt cache, and only that chunk's [chunk, V] log-probs exist at once; the
caller reduces them to a few numbers per token before the next chunk runs.
"""

import hashlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx

from backend import mlx_internals
from backend.dist import load_model, share


class PeerFailed(Exception):
    """Rank 0 failed before the ranks' work began; it reports the reason, the other ranks just stop."""


@dataclass
class Loaded:
    model: object
    tokenizer: object
    path: Path
    group: mx.distributed.Group

    @property
    def rank(self) -> int:
        return self.group.rank()


def load(path: str | Path, *, trust_remote_code: bool = False) -> Loaded:
    """The model at `path`: sharded over the `mlx.launch` ranks when there are several, else whole; its own
    Python code (the release's tokenizer class) runs only with `trust_remote_code`. Its KDA layers read as
    the daemon's do (in chunks on the CPU, backend/kda.py), whether or not an engine is made in this process
    (``compare --generate`` makes one), so a BASE and a comparison read the same way."""
    mlx_internals.read_kda_in_chunks()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a model directory (no config.json)")
    group = mx.distributed.init()
    model, tokenizer = load_model(str(path), group, trust_remote_code=trust_remote_code)
    return Loaded(model, tokenizer, path, group)


def model_info(path: Path) -> dict:
    """What the report says about a model: its path and a hash of its config."""
    return {"path": str(path), "config_sha256": hashlib.sha256((path / "config.json").read_bytes()).hexdigest()}


def share_result(make, group: mx.distributed.Group):
    """`make()` run on rank 0 and its result shared with every rank.

    If `make` raises, every rank stops instead of waiting for work that never comes: on one process
    the exception propagates; on several, rank 0 prints it before telling the others (the launcher
    may kill rank 0 as soon as a peer exits) and all ranks raise PeerFailed.
    """
    if group.size() == 1:
        return make()
    result = error = None
    if group.rank() == 0:
        try:
            result = make()
        except (ValueError, OSError) as e:  # what the CLI reports as a usage error
            error = str(e)
            print(f"k3-backend fidelity: {error}", file=sys.stderr, flush=True)
    result, error = share((result, error), group)
    if error is not None:
        raise PeerFailed(error)
    return result


def vocab_size(model) -> int:
    """Width of the model's output distribution, from one forward pass (no config guessing)."""
    from mlx_lm.models.cache import make_prompt_cache

    logits = model(mx.array([[0]]), cache=make_prompt_cache(model))
    return int(logits.shape[-1])


def log_probs(model, ids: list[int], chunk: int) -> Iterator[tuple[int, mx.array]]:
    """(start, log-probs [c, V] in float32) for positions start..start+c-1, predicting ids[start+1 : start+1+c].

    The caller must evaluate what it derives from each chunk before asking for the next one.
    """
    from mlx_lm.models.cache import make_prompt_cache

    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    cache = make_prompt_cache(model)
    inputs = mx.array(ids[:-1], dtype=mx.int32)
    for start in range(0, len(ids) - 1, chunk):
        logits = model(inputs[None, start : start + chunk], cache=cache)[0].astype(mx.float32)
        mx.eval([c.state for c in cache])
        yield start, logits - mx.logsumexp(logits, axis=-1, keepdims=True)
