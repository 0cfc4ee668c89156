"""Prefill: reading each prompt into its own cache, in chunks of its own size, one chunk per engine step.

The engine reads prompts here and hands each one to mlx-lm's BatchGenerator only to decode (with its last
token still to feed). Three things follow from reading them ourselves:

- Fair chunks. Prefill memory grows with chunk x context, so a long prompt needs a small chunk; but a
  chunk chosen for the whole batch would make every short prompt beside it crawl. Here each request has its
  own chunk (``chunk_for``), and requests read together only with others of the same chunk. Between two
  chunks every decoding request gets its token (the engine alternates), so a 100k-token prompt never stalls
  the others and is never read with a chunk made for a short one.
- Exact failures. A chunk that raises is retried for each of its requests alone, so the request that fails
  is known and fails alone (on every rank alike: they run the same chunks).
- Exact progress and cache boundaries: each request reports tokens read of its total, and a chunk never
  crosses a segment end, where the engine stores a copy of the cache.

Requests that read together are batched with mlx-lm's own ``PromptProcessingBatch`` (right-padded, merged
caches): on a many-expert MoE every chunk reads nearly all expert weights, so short prompts arriving
together still share their chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlx_lm.generate import PromptProcessingBatch

# Prefill memory grows with chunk x context; the base chunk is taken as safe up to this context.
SAFE_PREFILL_CONTEXT = 8192
MIN_PREFILL_STEP = 256


def chunk_for(base: int, context: int, safe_context: int = SAFE_PREFILL_CONTEXT) -> int:
    """The prefill chunk for a prompt of ``context`` tokens.

    The base chunk up to ``safe_context`` tokens; beyond, the chunk shrinks in proportion to the context, so
    chunk x context (the attention-score memory of one chunk) stays at most base x safe_context; in
    multiples of MIN_PREFILL_STEP and never below it (or below the base, if that is smaller).
    """
    if context <= safe_context:
        return base
    step = base * safe_context // context // MIN_PREFILL_STEP * MIN_PREFILL_STEP
    return min(base, max(MIN_PREFILL_STEP, step))


@dataclass
class Reading:
    """One prompt being read: its cache holds ``prompt[:pos]``; reading stops at ``end``."""

    prompt: list[int]
    cache: list  # the model's per-layer caches, batch of one
    pos: int
    end: int  # len(prompt) - 1: the last token is fed by the first decode step
    chunk: int
    stops: dict[int, str] = field(default_factory=dict)  # offset -> prompt-cache kind to store there
    last: int = 0  # tokens read by the last chunk

    @property
    def done(self) -> bool:
        return self.pos >= self.end

    def piece(self) -> list[int]:
        """The next chunk: at most ``chunk`` tokens, never past the next stop or the end."""
        limit = min([self.end, *(s for s in self.stops if s > self.pos)])
        return self.prompt[self.pos : min(limit, self.pos + self.chunk)]


def read(model, readings: list[Reading]) -> None:
    """Advance every reading by one piece in one batched forward pass; raises if the pass fails, and then
    leaves every reading as it was (their caches are only replaced once the pass has succeeded)."""
    pieces = [r.piece() for r in readings]
    batch = PromptProcessingBatch(
        model,
        uids=list(range(len(readings))),
        caches=[r.cache for r in readings],
        tokens=[[] for _ in readings],
        prefill_step_size=max(map(len, pieces)),
    )
    batch.prompt(pieces)
    for i, (r, piece) in enumerate(zip(readings, pieces, strict=True)):
        r.cache = batch.extract_cache(i)
        r.pos += len(piece)
        r.last = len(piece)
