"""Loading the model in parts, so the daemon can say how far it is while it loads.

On the Mac pair a load reads ~375 GB per Mac and takes minutes. `serve` binds its socket first and answers
``hello`` and ``status`` meanwhile (state ``loading``, bytes done of total, an estimate of the time left),
so an editor shows "backend loading (N %)" instead of "unreachable".

The load is mlx-lm's own path (`mlx_lm.utils.load_model` with ``lazy=True``, then the tensor-parallel
``shard``, then `load_tokenizer`, as `mlx_lm.utils.sharded_load` does), except that the parameters are
evaluated (read from the safetensors files) part by part instead of in one ``mx.eval``: a part is one
decoder layer (the embeddings, final norm and head make one more), and `LoadProgress` counts its bytes.
Evaluating in parts costs nothing: every parameter is read once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from k3lsp.wire.protocol import CodedError, ErrorCode

LOADING, READY, FAILED = "loading", "ready", "failed"
PROGRESS_EVERY = 2.0  # seconds between the progress messages of a request waiting for the load
SAY_EVERY = 5.0  # seconds between the lines that say how far the weights are read (LoadProgress.say)
STAGE_LINES = {  # what a person reads as the load enters each stage after the weights
    "tokenizer": "loading the model: the tokenizer",
    "warm-up": "compiling the kernels (the warm-up; the first run on a machine compiles mlx's CPU kernels: longer)",
    "ranks": "waiting for the other ranks of the pair to load their shards",
}
_LAYER = re.compile(r"^(.*?layers\.\d+)\.")

PartDone = Callable[[int, int], None]  # (bytes done, bytes total) after each part


@dataclass
class LoadProgress:
    """How far the load is: written by the loading thread, read by the event loop (plain attribute writes).

    ``stage``: ``weights`` (reading parameters), ``tokenizer``, ``warm-up`` (compiling the kernels),
    ``ranks`` (waiting for the other ranks of the pair), then ``ready``. With ``say``, each stage is said in one
    line, and how far the weights are every SAY_EVERY seconds: minutes of a load are never silent where a person
    waits for it (`k3-backend serve` prints them on stdout; the demo passes them on).
    """

    state: str = LOADING
    stage: str = "weights"
    bytes_done: int = 0
    bytes_total: int = 0
    error: str = ""
    started: float = field(default_factory=time.monotonic)
    say: Callable[[str], None] | None = field(default=None, repr=False)
    _said: float = field(default=0.0, repr=False)  # when the last line about the weights was said
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def part_done(self, done: int, total: int) -> None:
        with self._lock:
            self.bytes_done, self.bytes_total = done, total
        now = time.monotonic()
        if self.say is None or (done and (done >= total or now - self._said < SAY_EVERY)):
            return
        self._said = now
        if not done:
            self.say(f"loading the model: reading {_size(total)} of weights")
        else:
            eta = self.eta()
            self.say(f"loading the model: {self.percent()} % read" + (f", about {eta:.0f} s left" if eta else ""))

    def enter(self, stage: str) -> None:
        self.stage = stage
        if self.say is not None and stage in STAGE_LINES:
            self.say(STAGE_LINES[stage])

    def ready(self) -> None:
        self.state, self.stage = READY, READY

    def failed(self, error: str) -> None:
        self.state, self.error = FAILED, error

    def percent(self) -> int:
        """Bytes read of the weights, 0-99 while loading (the tokenizer and warm-up are short; 100 is ready)."""
        if self.state == READY:
            return 100
        with self._lock:
            done, total = self.bytes_done, self.bytes_total
        return min(99, 100 * done // total) if total else 0

    def eta(self) -> float | None:
        """Seconds left at the rate so far, or None before the first part is read."""
        with self._lock:
            done, total = self.bytes_done, self.bytes_total
        if self.state != LOADING or not done or not total:
            return None
        elapsed = time.monotonic() - self.started
        return round(elapsed * (total - done) / done, 1)

    def snapshot(self) -> dict:
        """What ``status`` (and a loading ``welcome``) carry under ``loading``."""
        with self._lock:
            done, total = self.bytes_done, self.bytes_total
        out = {
            "state": self.state,
            "stage": self.stage,
            "bytes_done": done,
            "bytes_total": total,
            "percent": self.percent(),
            "seconds": round(time.monotonic() - self.started, 1),
        }
        eta = self.eta()
        if eta is not None:
            out["eta_seconds"] = eta
        if self.error:
            out["error"] = self.error
        return out

    def describe(self) -> str:
        """One line for people: "backend loading (42 %, weights, about 80 s left)"."""
        if self.state == FAILED:
            return f"backend failed to load: {self.error}"
        if self.state == READY:
            return "backend ready"
        eta = self.eta()
        left = f", about {eta:.0f} s left" if eta is not None else ""
        return f"backend loading ({self.percent()} %, {self.stage}{left})"


def _size(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


@dataclass(frozen=True)
class ModelInfo:
    """What ``welcome`` says about the model, known from the checkpoint's files before its weights are read."""

    model_id: str
    fingerprint: str
    experts: int
    ranks: int
    random_weights: bool = False  # the checkpoint says it has random weights (backend/tiny.py): its findings are noise

    @classmethod
    def of(cls, model: str, ranks: int) -> ModelInfo:
        """From a local checkpoint directory; a hub repo that is not downloaded yet is only named (no
        fingerprint, 0 experts) until its load brings the files."""
        from backend.fingerprint import checkpoint_fingerprint

        path = Path(model)
        if not path.exists():
            return cls(model, "", 0, ranks)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        text = config.get("text_config", config)
        experts = int(text.get("num_experts") or 0)
        return cls(path.name or model, checkpoint_fingerprint(path), experts, ranks, says_random_weights(config))


def says_random_weights(config: dict) -> bool:
    """Whether a checkpoint's ``config.json`` says its weights are random (``backend/tiny.py`` writes it)."""
    return config.get("random_weights") is True


def parts(model) -> Iterator[list[mx.array]]:
    """The model's parameters in load order, one list per decoder layer and one for everything else (last)."""
    layers: dict[str, list[mx.array]] = {}
    rest: list[mx.array] = []
    for name, value in tree_flatten(model.parameters()):
        match = _LAYER.match(name)
        (layers.setdefault(match.group(1), []) if match else rest).append(value)
    yield from layers.values()
    if rest:
        yield rest


def evaluate_in_parts(model, part_done: PartDone | None = None, pace: float = 0.0) -> int:
    """``mx.eval`` the model's parameters part by part, calling ``part_done`` after each; returns the bytes.

    ``pace`` (seconds) is a pause after each part: it only exists to make the loading state of a tiny
    checkpoint visible in demos and tests (`serve --load-pace`); 0 in real use.
    """
    groups = list(parts(model))
    total = sum(a.nbytes for group in groups for a in group)
    done = 0
    if part_done is not None:
        part_done(0, total)
    for group in groups:
        mx.eval(group)
        done += sum(a.nbytes for a in group)
        if part_done is not None:
            part_done(done, total)
        if pace > 0:
            time.sleep(pace)
    return total


def load(
    path: Path,
    group: mx.distributed.Group | None,
    tokenizer_config: dict,
    *,
    trust_remote_code: bool,
    progress: LoadProgress | None = None,
    pace: float = 0.0,
):
    """(model, tokenizer): mlx-lm's load, or this rank's tensor-parallel shard of it, read part by part."""
    from mlx_lm.utils import load_model, load_tokenizer

    model, config = load_model(path, lazy=True, trust_remote_code=trust_remote_code)
    sharded = group is not None and group.size() > 1
    if sharded:
        model.shard(group)
    evaluate_in_parts(model, progress.part_done if progress else None, pace)
    if progress:
        progress.enter("tokenizer")
    tokenizer = load_tokenizer(path, tokenizer_config, eos_token_ids=config.get("eos_token_id", None))
    if sharded:
        if progress:
            progress.enter("ranks")
        mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group, stream=mx.cpu))  # every rank has its shard
    return model, tokenizer


class StillLoading(CodedError):
    """A request waited ``load_wait`` seconds and the model is still loading (error code ``loading``)."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.LOADING, message)


async def wait_loaded(
    loaded: asyncio.Event, progress: LoadProgress, bound: float, tell: Callable[[str], Awaitable[None]]
) -> None:
    """Wait until ``loaded`` is set, at most ``bound`` seconds, telling the client how far the load is every
    PROGRESS_EVERY seconds (and once at the start); raises StillLoading when the bound passes first."""
    if loaded.is_set():
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    while not loaded.is_set():
        left = deadline - loop.time()
        if left <= 0:
            raise StillLoading(f"{progress.describe()}: not ready within {bound:g} s; try again later")
        await tell(progress.describe())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loaded.wait(), min(PROGRESS_EVERY, left))
