"""The model engine: mlx-lm's BatchGenerator with prompt-cache reuse, per-request samplers and guards.

The daemon's scheduler thread drives it: `submit` and `cancel` record work, and each `step()` admits
requests (interactive first), runs one `BatchGenerator.next()` (one decode step for every running
sequence plus one prefill chunk for those still reading their prompt), detokenizes, applies the loop
guard and returns the events. It owns no sockets, threads or event loop, and every decision it makes
depends only on the calls it received and the request seeds, so N tensor-parallel ranks fed the same
calls run identical batches.

Prompt caches (docs/engine.md): Kimi K3's linear-attention caches cannot be trimmed, so a cache is
only reusable for prompts it is an exact prefix of. The engine stores one at each segment offset the
request names (end of system+tools, end of file context) and one at the end of every finished
generation (prompt + generated tokens, returned in the finish event), so an agent that continues by
appending a tool result to prompt + generation only prefills the new tokens.
"""

import heapq
import itertools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import LRUPromptCache
from mlx_lm.sample_utils import apply_top_p, greedy_sampler
from mlx_lm.utils import hf_repo_to_path

from backend.dist import load_model
from backend.fingerprint import checkpoint_fingerprint
from backend.guards import FinishCounter, LoopDetector

log = logging.getLogger(__name__)

# Prefill memory grows with chunk x context; the base step is taken as safe up to this context.
SAFE_PREFILL_CONTEXT = 8192
MIN_PREFILL_STEP = 256


@dataclass
class EngineArgs:
    model: str  # path or repo
    max_tokens: int = 1024
    temp: float = 1.0
    top_p: float = 0.95
    prefill_step_size: int = 2048
    max_concurrency: int = 8  # completion batch size
    interactive_reserve: int = 1  # slots background requests leave free, so an edit starts at once
    prompt_cache_size: int = 16  # LRU entries
    prompt_cache_bytes: int = 1 << 63  # LRU byte budget (a real Kimi K3 entry holds every layer's KDA state)
    loop_span: int = 64  # tokens a repetition must cover to count as a loop
    loop_max_period: int = 16  # longest repeated block the loop guard looks for
    trust_remote_code: bool = False  # run Python shipped with the checkpoint (the release's tokenizer class)


@dataclass
class GenRequest:
    rid: int  # unique per engine
    prompt: list[int]  # full rendered prompt token ids
    segments: list[int]  # token offsets (ascending, <= len(prompt)) where prompt caches are worth storing
    max_tokens: int
    temp: float
    top_p: float
    seed: int  # per-request sampler seed (identical on every rank)
    priority: int = 0  # 0 interactive first, 1 background
    forced: list[int] | None = None  # scripted answer: force exactly these tokens, then eos


@dataclass
class GenEvent:
    rid: int
    text: str  # newly detokenized text since the last event (may be "")
    finish: str | None = None  # None while running; "stop", "length", "loop", "cancelled", "error"
    # on finish: prompt_tokens, cached_tokens, generated_tokens, batch_size_peak, prefill_step;
    # with finish "error" also "error": what was wrong
    stats: dict | None = None
    # on finish: every token id generated, the stop token included (what the prompt cache stored after the
    # prompt), so a continuation can append exactly what the model produced
    tokens: list[int] | None = None


def local_checkpoint(model: str) -> Path:
    """The directory a ``--model`` names: itself, or the Hugging Face snapshot ``load`` downloaded."""
    path = Path(model)
    return path if path.exists() else hf_repo_to_path(model)


def prefill_step(base: int, context: int) -> int:
    """The prefill chunk for a prompt of `context` tokens.

    The base step up to SAFE_PREFILL_CONTEXT tokens; beyond, the chunk shrinks in proportion to the
    context, so chunk x context (the attention-score memory of one chunk) stays at most
    base x SAFE_PREFILL_CONTEXT; in multiples of MIN_PREFILL_STEP and never below it.
    """
    if context <= SAFE_PREFILL_CONTEXT:
        return base
    step = base * SAFE_PREFILL_CONTEXT // context // MIN_PREFILL_STEP * MIN_PREFILL_STEP
    return min(base, max(MIN_PREFILL_STEP, step))


def seeded_sampler(temp: float, top_p: float, seed: int):
    """mlx-lm's `make_sampler(temp, top_p)` chain (top-p filter, then categorical at `temp`), drawing
    from the request's own key stream instead of the global random state: a request samples the
    same tokens whatever else is in the batch, and identically on every rank."""
    if temp == 0:
        return greedy_sampler
    key = [mx.random.key(seed % (1 << 64))]  # any int seed, negative ones too

    def sample(logprobs: mx.array) -> mx.array:
        key[0], draw = mx.random.split(key[0])
        if 0 < top_p < 1.0:
            logprobs = apply_top_p(logprobs, top_p)
        return mx.random.categorical(logprobs * (1.0 / temp), key=draw)

    return sample


def forcing(tokens: list[int], eos: int):
    """A logits processor that leaves only the next scripted token (then `eos`) possible.

    Everything else in the path (batching, the sampler, the detokenizer, stop tokens) still runs,
    which is what lets tests script exact answers through the real engine.
    """
    script = [*tokens, eos]
    position = [0]

    def process(_context: mx.array, logits: mx.array) -> mx.array:
        target = script[min(position[0], len(script) - 1)]
        position[0] += 1
        return mx.where(mx.arange(logits.shape[-1]) == target, 0.0, -1e9).astype(logits.dtype)[None]

    return process


@dataclass
class _Live:
    """A request inside the BatchGenerator."""

    req: GenRequest
    uid: int
    cached: int
    store_at: set[int]
    detokenizer: object
    loop: LoopDetector
    prefill_step: int
    generated: list[int] = field(default_factory=list)
    batch_peak: int = 0
    decoding: bool = False

    def stats(self) -> dict:
        return {"prompt_tokens": len(self.req.prompt), "cached_tokens": self.cached,
                "generated_tokens": len(self.generated), "batch_size_peak": self.batch_peak,
                "prefill_step": self.prefill_step}


@dataclass
class _Counters:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    busy_seconds: float = 0.0
    batch_peak: int = 0
    finishes: FinishCounter = field(default_factory=FinishCounter)


class Engine:
    """Continuous batching over one loaded model; see the module docstring."""

    def __init__(self, args: EngineArgs, model=None, tokenizer=None, group=None):
        self.args = args
        self.ranks = group.size() if group is not None else 1
        if model is None or tokenizer is None:
            model, tokenizer = load_model(args.model, group, trust_remote_code=args.trust_remote_code)
        self.model, self.tokenizer = model, tokenizer
        text = getattr(model.args, "text_config", model.args)
        self.model_id = Path(args.model).name or args.model
        self.fingerprint = checkpoint_fingerprint(local_checkpoint(args.model))  # what results are cached under
        self.experts = int(getattr(text, "num_experts", None) or 0)
        self.layers = int(text.num_hidden_layers)
        self.vocab_size = int(text.vocab_size)
        self.eos = min(tokenizer.eos_token_ids)
        self._cache = self._new_cache()
        self._gen = self._new_generator()
        self._queue: list[tuple[int, int, GenRequest]] = []
        self._order = 0
        self._rejected: list[GenEvent] = []
        self._cancel: set[int] = set()
        self._live: dict[int, _Live] = {}
        self._uid_to_rid: dict[int, int] = {}
        self._n = _Counters()

    def _new_cache(self) -> LRUPromptCache:
        return LRUPromptCache(max_size=self.args.prompt_cache_size, max_bytes=self.args.prompt_cache_bytes)

    def _new_generator(self) -> BatchGenerator:
        concurrency = max(1, self.args.max_concurrency)
        return BatchGenerator(
            self.model,
            max_tokens=self.args.max_tokens,
            stop_tokens=[[t] for t in sorted(self.tokenizer.eos_token_ids)],
            completion_batch_size=concurrency,
            prefill_batch_size=min(concurrency, 8),
            prefill_step_size=self.args.prefill_step_size,
        )

    # --- the daemon's interface ------------------------------------------------------------------------------

    def warmup(self) -> None:
        """Generate a few tokens for two batched requests so the CPU/GPU kernels are compiled now."""
        prompt = self.tokenizer.encode("int main(void) { return 0; }")
        for rid in (-1, -2):
            self.submit(GenRequest(rid, prompt, [], 4, self.args.temp, self.args.top_p, seed=-rid))
        self.run_until_idle(64)
        self._cache = self._new_cache()
        self._n = _Counters()

    def submit(self, req: GenRequest) -> None:
        """Queue a request; a malformed one finishes with "error" at the next step."""
        if req.rid in self._live or any(q[2].rid == req.rid for q in self._queue):
            raise ValueError(f"request id {req.rid} is already in the engine")
        try:
            problem = self._check(req)
        except TypeError as e:  # fields of the wrong type altogether
            problem = f"malformed request: {e}"
        if problem:
            self._rejected.append(self._finish_queued(req, "error", problem))
            return
        heapq.heappush(self._queue, (req.priority, self._order, req))
        self._order += 1

    def run_until_idle(self, max_steps: int) -> list[GenEvent]:
        """Step until nothing is queued or running, at most ``max_steps`` times; the events of all steps.

        For callers without a scheduler (warm-up, offline sampling); check ``busy()`` after it when
        running out of steps matters.
        """
        events: list[GenEvent] = []
        for _ in range(max_steps):
            if not self.busy():
                break
            events += self.step()
        return events

    def cancel(self, rid: int) -> None:
        self._cancel.add(rid)

    def busy(self) -> bool:
        return bool(self._queue or self._live or self._rejected or self._cancel & self._known())

    def step(self) -> list[GenEvent]:
        """One scheduling step. Events come for requests with new text or a finish; never raises for
        a bad request (it finishes with "error" and stats["error"] saying why)."""
        tic = time.perf_counter()
        events, self._rejected = self._rejected, []
        events += self._apply_cancellations()
        events += self._admit()
        if self._live:
            events += self._advance()
        self._n.busy_seconds += time.perf_counter() - tic
        return events

    def stats(self) -> dict:
        n = self._n
        decoding = sum(live.decoding for live in self._live.values())
        return {
            "active": len(self._live), "decoding": decoding, "prefilling": len(self._live) - decoding,
            "queued": len(self._queue), "prompt_tokens": n.prompt_tokens, "cached_tokens": n.cached_tokens,
            "tokens_generated": n.generated_tokens,
            "tokens_per_s": n.generated_tokens / n.busy_seconds if n.busy_seconds else 0.0,
            "batch_size_peak": n.batch_peak, "loops": n.finishes.counts["loop"],
            "stop_tokens": n.finishes.counts["stop"], "prompt_cache_entries": len(self._cache),
            "prompt_cache_bytes": self._cache.nbytes, **n.finishes.summary(),
        }

    # --- admission ---------------------------------------------------------------------------------------------

    def _check(self, req: GenRequest) -> str | None:
        """Why a request cannot run, or None."""
        tokens = [*req.prompt, *(req.forced or [])]
        if not req.prompt:
            return "empty prompt"
        if not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in tokens):
            return f"prompt and forced tokens must be ids in 0..{self.vocab_size - 1}"
        if not isinstance(req.max_tokens, int) or req.max_tokens < 1:
            return f"max_tokens must be a positive integer, got {req.max_tokens!r}"
        if not isinstance(req.seed, int) or not isinstance(req.priority, int):
            return f"seed and priority must be integers, got {req.seed!r} and {req.priority!r}"
        if not (req.temp >= 0 and 0 <= req.top_p <= 1):
            return f"need temp >= 0 and 0 <= top_p <= 1, got temp={req.temp} top_p={req.top_p}"
        if any(not isinstance(s, int) or not 0 < s <= len(req.prompt) for s in req.segments):
            return f"segments must be offsets in 1..{len(req.prompt)}, got {req.segments}"
        return None

    def _known(self) -> set[int]:
        return set(self._live) | {q[2].rid for q in self._queue}

    def _apply_cancellations(self) -> list[GenEvent]:
        if not self._cancel:
            return []
        events = []
        queued = [q for q in self._queue if q[2].rid in self._cancel]
        if queued:
            self._queue = [q for q in self._queue if q[2].rid not in self._cancel]
            heapq.heapify(self._queue)
            events += [self._finish_queued(q[2], "cancelled") for q in queued]
        running = [rid for rid in self._cancel if rid in self._live]
        if running:
            self._gen.remove([self._live[rid].uid for rid in running])
            events += [self._finish(self._live[rid], "cancelled", "") for rid in sorted(running)]
        self._cancel.clear()
        return events

    def _finish_queued(self, req: GenRequest, reason: str, error: str | None = None) -> GenEvent:
        """End a request that never entered the BatchGenerator."""
        self._n.finishes.add(reason)
        prompt_tokens = len(req.prompt) if isinstance(req.prompt, list) else 0
        stats = {"prompt_tokens": prompt_tokens, "cached_tokens": 0, "generated_tokens": 0,
                 "batch_size_peak": 0, "prefill_step": 0}
        return GenEvent(req.rid, "", reason, stats | ({"error": error} if error else {}))

    def _admit(self) -> list[GenEvent]:
        """Start queued requests, interactive first; background ones never take the reserved slots
        (but always get at least one), so a request for the document being edited never waits
        for a workspace audit to finish."""
        events = []
        background_limit = max(1, self.args.max_concurrency - self.args.interactive_reserve)
        while self._queue and len(self._live) < self.args.max_concurrency:
            priority, _, req = self._queue[0]
            if priority > 0 and len(self._live) >= background_limit:
                break
            heapq.heappop(self._queue)
            try:
                self._insert(req)
            except Exception as e:  # one bad request must not stop the others
                log.exception("request %s could not be admitted", req.rid)
                events.append(self._finish_queued(req, "error", f"{type(e).__name__}: {e}"))
        return events

    def _insert(self, req: GenRequest) -> None:
        prompt = req.prompt
        # Look up prompt[:-1]: a cache must leave at least one token to feed, and can't be trimmed.
        cache, rest = self._cache.fetch_nearest_cache(self.model_id, prompt[:-1])
        cached = len(prompt) - 1 - len(rest) if cache is not None else 0
        cuts = sorted({s for s in req.segments if cached < s < len(prompt)})
        bounds = [cached, *cuts, len(prompt)]
        pieces = [prompt[a:b] for a, b in itertools.pairwise(bounds)]
        sampler = seeded_sampler(req.temp, req.top_p, req.seed)
        processors = [forcing(req.forced, self.eos)] if req.forced is not None else []
        (uid,) = self._gen.insert_segments(
            [pieces], max_tokens=[req.max_tokens], caches=[cache], all_tokens=[prompt[:cached]],
            samplers=[sampler], logits_processors=[processors],
        )
        self._live[req.rid] = _Live(
            req, uid, cached, set(cuts), self.tokenizer.detokenizer,
            LoopDetector(self.args.loop_span, self.args.loop_max_period), self.args.prefill_step_size,
        )
        self._uid_to_rid[uid] = req.rid
        self._n.prompt_tokens += len(prompt)
        self._n.cached_tokens += cached

    # --- one step ----------------------------------------------------------------------------------------------

    def _advance(self) -> list[GenEvent]:
        reading = [live for live in self._live.values() if not live.decoding]
        if reading:
            step = prefill_step(self.args.prefill_step_size, max(len(live.req.prompt) for live in reading))
            self._gen.prefill_step_size = step
            for live in reading:
                live.prefill_step = min(live.prefill_step, step)
        try:
            prompt_responses, gen_responses = self._gen.next()
        except Exception as e:  # the batch is unusable: fail its requests, keep serving new ones
            if self.ranks > 1:  # unless other ranks are in this batch too: only the scheduler can decide
                raise
            log.exception("generation step failed; failing %d requests", len(self._live))
            self._gen = self._new_generator()
            return [self._finish(live, "error", "", f"generation failed: {type(e).__name__}: {e}")
                    for live in list(self._live.values())]
        self._store_segments(prompt_responses)
        batch = len(gen_responses)
        self._n.batch_peak = max(self._n.batch_peak, batch)
        events, ended = [], []
        for r in gen_responses:
            live = self._live.get(self._uid_to_rid.get(r.uid))
            if live is None:
                continue
            try:
                event = self._on_token(live, r, batch)
            except Exception as e:
                log.exception("request %s failed after a token", live.req.rid)
                if live.req.rid not in self._live:
                    continue
                event = self._finish(live, "error", "", f"{type(e).__name__}: {e}")
                ended.append(live.uid)
            if event.finish == "loop":
                ended.append(live.uid)
            if event.text or event.finish:
                events.append(event)
        if ended:
            self._gen.remove(ended)
        return events

    def _store_segments(self, prompt_responses) -> None:
        """Keep the cache at every requested segment end a prefill chunk just reached."""
        for r in prompt_responses:
            live = self._live.get(self._uid_to_rid.get(r.uid))
            if live is None or not r.end_of_segment or r.end_of_prompt:
                continue
            if live.cached + r.progress[0] not in live.store_at:
                continue
            for cache, tokens in self._gen.extract_cache([r.uid]).values():
                self._keep_cache(list(tokens), cache, "system" if len(tokens) == min(live.store_at) else "user")

    def _on_token(self, live: _Live, r, batch: int) -> GenEvent:
        live.decoding = True
        live.generated.append(r.token)
        live.batch_peak = max(live.batch_peak, batch)
        self._n.generated_tokens += 1
        detok = live.detokenizer
        if r.finish_reason == "stop":  # the stop token itself is not text
            detok.finalize()
            return self._finish(live, "stop", detok.last_segment, cache=(r.all_tokens, r.prompt_cache))
        detok.add_token(r.token)
        if r.finish_reason == "length":
            detok.finalize()
            return self._finish(live, "length", detok.last_segment, cache=(r.all_tokens, r.prompt_cache))
        if live.loop.add(r.token):
            detok.finalize()
            return self._finish(live, "loop", detok.last_segment)
        return GenEvent(live.req.rid, detok.last_segment)

    def _finish(self, live: _Live, reason: str, text: str, error: str | None = None, cache=None) -> GenEvent:
        """End a live request: forget it, count it, and keep its cache (prompt + generation)."""
        del self._live[live.req.rid]
        del self._uid_to_rid[live.uid]
        self._n.finishes.add(reason)
        event = GenEvent(live.req.rid, text, reason, live.stats() | ({"error": error} if error else {}),
                         list(live.generated))
        if cache is not None and cache[1] is not None:
            self._keep_cache(list(cache[0]), cache[1], "assistant")
        return event

    def _keep_cache(self, tokens: list[int], cache, kind: str) -> None:
        """Store a prompt cache; a failure costs only a later cache miss, never a request its finish."""
        try:
            self._cache.insert_cache(self.model_id, tokens, cache, cache_type=kind)
        except Exception:
            log.exception("could not keep a %s prompt cache of %d tokens", kind, len(tokens))

