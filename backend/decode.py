"""The decode step as one compiled graph: the model's forward pass for the batch's next tokens, the forced tokens
of scripted answers and greedy sampling, with the same tokens as mlx-lm's own step.

Why: on mlx's CPU backend a decode step of a small model is about a thousand primitives with a few microseconds
of arithmetic each, and most of the step is their dispatch (each one a task handed to the stream's thread, its
allocations), not the arithmetic (docs/engine.md, the step profile). ``mx.compile`` fuses the chains of
elementwise primitives into single kernels and replays the traced graph without running the model's Python
again. mlx-lm's ``GenerationBatch`` does not compile; ``Batch`` below is that class with its step compiled, and
``Generator`` is mlx-lm's ``BatchGenerator`` decoding with it (everything else, joining, finishing, prompt caches,
stays mlx-lm's).

How shapes hold still. A compiled function is traced again whenever an input shape changes, and a batch's KV
caches grow every step. So each ``BatchKVCache`` buffer is kept at a capacity rounded up to ``CAPACITY_STEP``
positions, the step writes the new key and value at a position given as an array (``mx.slice_update``), and
attention covers the whole buffer with the positions past the last one masked (``_KV``): one trace serves
``CAPACITY_STEP`` steps of one batch size. The linear-attention (KDA) states of kimi_k3 (``ArraysCache``) have
fixed shapes. Traces are kept per (batch size, capacities), at most ``TRACES`` of them (about 7 ms each to make).

Same tokens. A masked position gets a probability of exactly 0, and on the CPU backend mlx reduces in order
(its softmax one element at a time, the bundled BLAS's sgemm along the sequence), so the positions past the
end add exact zeros: the logits are bitwise mlx-lm's (tests/backend/test_decode.py checks it over generations
that join, finish and cross capacities). On Metal the reductions are trees, so there the step stays mlx-lm's,
as it does for a model whose caches or attention this was not checked against (``COMPILED_MODELS``), for
processors other than ``Forcing`` and on any step whose batch does not fit (``_plan``).

The attention on two CPU streams. Most of a step is small operations one thread has to dispatch, too short for
a second thread to gain anything; but the attention's products over the KV positions are long (mlx's CPU
matmul is the reference BLAS here), and the second core is otherwise idle. So where a step's attention scores
number ``SPLIT_SCORES`` or more, the two halves of the batch are computed on two streams, the second with a
thread of its own (``Generator(two_streams=False)``, ``k3-backend serve --one-stream``: on one). Each sequence's
attention is computed as it was in the whole, so the tokens stay bitwise mlx-lm's. This hooks mlx-lm's kimi_k3
at its ``scaled_dot_product_attention`` (``attention``, put there by backend/mlx_internals.py with the step), for the
compiled step's caches (``_KV``) only. One sequence alone is not split (its query heads in two halves gained nothing
measurable in bench/tool_loop.py: docs/engine.md).

Both are overrides of mlx-lm internals: the engine gets a ``Generator`` only through
``mlx_internals.decode_generator``, which uses it on the mlx and mlx-lm versions it was checked on alone.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, GenerationBatch
from mlx_lm.models import kimi_k3
from mlx_lm.models.cache import ArraysCache, BatchKVCache
from mlx_lm.sample_utils import greedy_sampler

CAPACITY_STEP = 64  # KV positions a buffer grows by: a trace serves this many steps (attention over <= 63 more)
TRACES = 64  # compiled (structure, batch size, capacities) kept
COMPILED_MODELS = frozenset({"kimi_k3"})  # model types whose caches and attention the compiled step was checked on
FORCED_OFF = -1e9  # a forced row's logit for every token but the forced one
# attention scores (batch x query heads x KV positions) from which a compiled step's attention runs on two
# streams: below it the second stream's hand-over costs what it saves (bench/decode_step.py, docs/engine.md)
SPLIT_SCORES = 49_152


class Forcing:
    """A logits processor that leaves only the next scripted token (then ``eos``) possible.

    Everything else in the path (batching, the sampler, the detokenizer, stop tokens) still runs, which is what
    lets tests script exact answers through the real engine. ``Batch`` takes the targets of all its forced rows
    at once (``take``) and builds their logits in its graph; mlx-lm's own step (a sequence's first token, a step
    that is not compiled) calls the processor. There the forced logits depend on the model's (``mx.depends``):
    otherwise nothing evaluates the forward pass while decoding, each step's caches stay a lazy graph, and the
    whole generation is computed at once when its cache is first evaluated (on the tiny checkpoint a 20 s
    stall for 2,000 tokens inside one step, which holds up every other request). The token context mlx-lm
    passes is not read.
    """

    def __init__(self, tokens: list[int], eos: int):
        self.script = [*tokens, eos]
        self.position = 0

    def take(self) -> int:
        """The token this step forces (the last one, eos, from then on)."""
        target = self.script[min(self.position, len(self.script) - 1)]
        self.position += 1
        return target

    def __call__(self, _context: mx.array, logits: mx.array) -> mx.array:
        return mx.depends(_forced_row(self.take(), logits.shape[-1], logits.dtype), logits)


@functools.lru_cache(maxsize=512)
def _forced_row(target: int, vocab: int, dtype: mx.Dtype) -> mx.array:
    """The logits that leave only ``target`` possible, built once per token: a forced step of mlx-lm's then adds
    one primitive per sequence to the batch's graph (``mx.depends``), not six (bounded: 512 rows of the
    vocabulary)."""
    row = mx.where(mx.arange(vocab) == target, 0.0, FORCED_OFF).astype(dtype)[None]
    mx.eval(row)
    return row


class Generator(BatchGenerator):
    """mlx-lm's continuous batching with ``Batch``'s compiled decode step (``two_streams``: its long attention on
    two CPU streams, see the module docstring)."""

    def __init__(self, model, two_streams: bool = True, **options):
        super().__init__(model, **options)
        self._generation_batch = Batch.empty(model, self.sampler)
        self._generation_batch.two_streams = two_streams


class Batch(GenerationBatch):
    """mlx-lm's ``GenerationBatch`` whose step is one compiled graph when ``_plan`` finds the batch fits.

    A compiled step reads the tokens one step late as mlx-lm's does (the next step's forward pass is started
    before the current tokens are read). It returns no log-probabilities (``Response.logprobs`` is None: the
    engine reads none), which saves a slice per sequence and step. Its traces live as long as it does: one
    generator's life.
    """

    two_streams = False  # whether a long attention runs on two CPU streams (Generator sets it)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._traces: OrderedDict = OrderedDict()

    def _step(self):
        plan = _plan(self)
        if plan is None:
            return super()._step()
        inputs = self._next_tokens
        self._current_tokens, self._current_logprobs = inputs, self._next_logprobs
        targets, forced = plan.forcing(self.logits_processors)
        args = [inputs, targets, forced, *plan.state(self.prompt_cache)]
        outs = self._compiled(plan, args)(*args)
        del args  # the old KV buffers: only the graph holds them now, so the writes are done in place
        head, state = outs[0], outs[1:]
        plan.store(self.prompt_cache, state)
        self._next_tokens = head if plan.greedy else _sample(self.samplers, head)
        self._next_logprobs = [None] * len(self.uids)
        mx.async_eval(self._next_tokens, state)
        mx.eval(inputs)
        tokens = inputs.tolist()
        for context, token in zip(self.tokens, tokens, strict=True):
            context.append(token)
        return tokens, self._current_logprobs

    def _compiled(self, plan: _Plan, args: list[mx.array]):
        """The compiled step for this plan and these input shapes; the least recently used past TRACES dropped."""
        key = (plan, tuple(a.shape for a in args))
        fn = self._traces.get(key)
        if fn is None:
            fn = self._traces[key] = mx.compile(_step_function(self.model, plan))
            while len(self._traces) > TRACES:
                self._traces.popitem(last=False)
        self._traces.move_to_end(key)
        return fn


def _sample(samplers: list, logprobs: mx.array) -> mx.array:
    """Each sequence's own sampler on its row (mlx-lm's way when the samplers differ: seeded ones do)."""
    if all(s is samplers[0] for s in samplers):
        return samplers[0](logprobs)
    return mx.concatenate([s(logprobs[e : e + 1]) for e, s in enumerate(samplers)], axis=0)


@dataclass(frozen=True)
class _Plan:
    """What a compiled step of a batch looks like: per cache, "kv" or ("arrays", its size, has left padding, has
    lengths); whether sampling is greedy (then it is in the graph); whether a long attention is split."""

    caches: tuple
    greedy: bool
    two_streams: bool

    @staticmethod
    def forcing(processors: list) -> tuple[mx.array, mx.array]:
        """Each sequence's forced token (0 where none) and whether it has one."""
        rows = [p[0].take() if p else -1 for p in processors]
        return mx.array([max(t, 0) for t in rows], dtype=mx.int32), mx.array([t >= 0 for t in rows])

    def state(self, caches: list) -> list[mx.array]:
        """The caches' arrays, each KV buffer first brought to its capacity."""
        out = []
        for kind, c in zip(self.caches, caches, strict=True):
            if kind == "kv":
                _fit(c)
                out += [c.keys, c.values, c.offset, c.left_padding, mx.array(c._idx)]
            else:
                out += [*c.cache, *(a for a in (c.left_padding, c.lengths) if a is not None)]
        return out

    def store(self, caches: list, state: list[mx.array]) -> None:
        """Put the step's new arrays back into mlx-lm's caches (which keep serving joins, finishes, extracts)."""
        it = iter(state)
        for kind, c in zip(self.caches, caches, strict=True):
            if kind == "kv":
                c.keys, c.values, c.offset = next(it), next(it), next(it)
                c._idx += 1
            else:
                c.cache = [next(it) for _ in c.cache]
                if c.left_padding is not None:
                    c.left_padding = next(it)
                if c.lengths is not None:
                    c.lengths = next(it)


def _plan(batch: GenerationBatch) -> _Plan | None:
    """The compiled step's plan for ``batch``, or None where mlx-lm's own step must run (see the module
    docstring)."""
    model = batch.model
    if mx.default_device().type != mx.DeviceType.cpu or getattr(model, "model_type", None) not in COMPILED_MODELS:
        return None
    if any(p and (len(p) > 1 or not isinstance(p[0], Forcing)) for p in batch.logits_processors):
        return None
    caches = []
    for c in batch.prompt_cache:
        if type(c) is BatchKVCache and c.keys is not None:
            caches.append("kv")
        elif type(c) is ArraysCache and all(a is not None for a in c.cache):
            caches.append(("arrays", len(c.cache), c.left_padding is not None, c.lengths is not None))
        else:
            return None
    samplers = batch.samplers or [batch.fallback_sampler] * len(batch.uids)
    return _Plan(tuple(caches), all(s is greedy_sampler for s in samplers), batch.two_streams)


def _fit(c: BatchKVCache) -> None:
    """Bring a KV buffer to the capacity its next position needs: a multiple of CAPACITY_STEP above it (what lies
    past the last position is never read unmasked)."""
    capacity = (c._idx // CAPACITY_STEP + 1) * CAPACITY_STEP
    size = c.keys.shape[2]
    if size < capacity:
        pad = [(0, 0), (0, 0), (0, capacity - size), (0, 0)]
        c.keys, c.values = mx.pad(c.keys, pad), mx.pad(c.values, pad)
    elif size > capacity:
        c.keys, c.values = mx.contiguous(c.keys[..., :capacity, :]), mx.contiguous(c.values[..., :capacity, :])


def _step_function(model, plan: _Plan):
    """A new function (so a trace of its own) computing one decode step of a batch with these caches."""

    def step(inputs, targets, forced, *state):
        it = iter(state)
        cache = []
        for kind in plan.caches:
            if kind == "kv":
                cache.append(_KV(*(next(it) for _ in range(5)), plan.two_streams))
            else:
                _, size, padded, lengths = kind
                c = ArraysCache(size)
                c.cache = [next(it) for _ in range(size)]
                c.left_padding = next(it) if padded else None
                c.lengths = next(it) if lengths else None
                cache.append(c)
        logits = model(inputs[:, None], cache=cache)[:, -1, :]
        rows = mx.where(mx.arange(logits.shape[-1]) == targets[:, None], 0.0, FORCED_OFF).astype(logits.dtype)
        logits = mx.where(forced[:, None], rows, logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        out = [greedy_sampler(logprobs) if plan.greedy else logprobs]
        for c in cache:
            if isinstance(c, _KV):
                out += [c.keys, c.values, c.offset]
            else:
                out += [*c.cache, *(a for a in (c.left_padding, c.lengths) if a is not None)]
        return out

    return step


class _KV:
    """A BatchKVCache inside the compiled step: the buffer at its full capacity, written at position ``idx``
    (an array, so the trace does not depend on it), attention masked to the positions ``left_padding..idx``:
    what mlx-lm's mask for one new token allows (``create_causal_mask(1, offset=idx, left_padding=...)``);
    ``two_streams``: whether its attention may be split (``attention``)."""

    def __init__(self, keys, values, offset, left_padding, idx, two_streams: bool):
        self.keys, self.values, self.offset, self.left_padding, self.idx = keys, values, offset, left_padding, idx
        self.two_streams = two_streams

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        self.keys = mx.slice_update(self.keys, keys, self.idx, axes=(2,))
        self.values = mx.slice_update(self.values, values, self.idx, axes=(2,))
        self.offset = self.offset + keys.shape[2]
        return self.keys, self.values

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        if n != 1 or window_size is not None:
            raise ValueError("the compiled step decodes one token per sequence, without a window")
        pos = mx.arange(self.keys.shape[2])
        return (self.left_padding[:, None, None, None] <= pos) & (pos <= self.idx)


@functools.cache
def _second_stream() -> mx.Stream:
    """The CPU stream (and so the thread) the second half of a split attention runs on, made on first use."""
    return mx.new_stream(mx.cpu)


def attention(queries, keys, values, cache, scale, mask, sinks=None):
    """mlx-lm's ``scaled_dot_product_attention`` as kimi_k3 calls it; for a compiled step's cache with enough
    scores, in two halves of the batch's sequences on two streams (the module docstring)."""
    batch = queries.shape[0]
    if (
        not isinstance(cache, _KV)
        or not cache.two_streams
        or sinks is not None
        or batch < 2
        or queries.size // queries.shape[-1] * keys.shape[2] < SPLIT_SCORES
    ):
        return _MLX_ATTENTION(queries, keys, values, cache, scale, mask, sinks)
    outs = []
    for rows, stream in (
        (slice(None, batch // 2), mx.default_stream(mx.cpu)),
        (slice(batch // 2, None), _second_stream()),
    ):
        with mx.stream(stream):
            m = mask[rows] if isinstance(mask, mx.array) and mask.shape[0] == batch else mask
            outs.append(_MLX_ATTENTION(queries[rows], keys[rows], values[rows], cache, scale, m))
    return mx.concatenate(outs)


_MLX_ATTENTION = kimi_k3.scaled_dot_product_attention  # mlx-lm's, before mlx_internals puts ``attention`` there
