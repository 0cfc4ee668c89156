"""The model engine: prompts read in fair chunks, decoded by mlx-lm's BatchGenerator, with prompt-cache reuse,
per-request samplers and guards.

The daemon's scheduler thread drives it: `submit`, `cancel`, `fail` and `release` record work, and each
`step()` admits requests (interactive first, refusing prompts over `max_prompt_tokens` before any work),
reads one prefill chunk of every request still reading its prompt (backend/prefill.py: each with its own
chunk), hands the ones that are read to the BatchGenerator, runs one decode step for every decoding sequence,
detokenizes, applies the loop guard and returns the events. It owns no sockets, threads or event loop, and
every decision it makes depends only on the calls it received and the request seeds, so N tensor-parallel
ranks fed the same calls run identical batches.

Failures stay with their request: a prefill chunk that raises fails the request(s) it read; a decode step
that raises fails the requests decoding in it; the engine goes on. ``outcome()`` says which requests failed
in the last step and digests the state the step started from, so the ranks of a pair can check that they
agree and fail on every rank what failed on one (backend/scheduler.py).

On several ranks every collective (the model's own, inside a forward pass, and the scheduler's exchange) must
run in the same order on every rank, one at a time: all model work runs on mlx-lm's generation stream, and
since its decode step leaves the next forward pass running in the background, a step on a pair ends by
waiting for it.

Prompt caches (backend/prompt_cache.py, docs/engine.md): a copy is stored at each segment end the request
names (the first: system + tools; later ones: a file's shared context) and at the end of every finished
generation (prompt + generated tokens, the stop token included). The finish event returns the generated ids,
so the next round of the conversation appends its tool turn to exactly prompt + generation and continues
that entry, prefilling only the new tokens.
"""

import hashlib
import heapq
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import apply_top_p, greedy_sampler
from mlx_lm.utils import hf_repo_to_path

from backend import decode, dist, memory, mlx_internals, prefill
from backend.fingerprint import checkpoint_fingerprint
from backend.guards import FinishCounter, LoopDetector
from backend.hooks import About, EngineHooks
from backend.loading import says_random_weights
from backend.prompt_cache import CONTEXT, CONTINUATION, SYSTEM, PromptCache
from backend.settings import flag
from k3lsp.wire.protocol import ErrorCode

log = logging.getLogger(__name__)

DECODE_PROGRESS_EVERY = 32  # generated tokens between two decode progress events
PHASES = ("admit", "prefill", "decode", "tokens", "sync")  # of a step, timed (Engine.stats()["step_seconds"])


@dataclass
class EngineArgs:
    model: str  # path or repo
    max_tokens: int = 1024
    temp: float = 1.0
    top_p: float = 0.95
    prefill_step_size: int = field(
        default=2048,
        metadata=flag(  # the chunk of a prompt up to prefill_context tokens
            "prefill chunk (smaller for long prompts)"
        ),
    )
    prefill_context: int = prefill.SAFE_PREFILL_CONTEXT  # beyond, the chunk shrinks with the prompt
    max_concurrency: int = field(default=8, metadata=flag("requests admitted at once (reading or decoding)"))
    interactive_reserve: int = 1  # slots background requests leave free, so an edit starts at once
    prompt_cache_size: int = field(default=16, metadata=flag("stored prompt prefixes (prompt cache entries)"))
    prompt_cache_bytes: int = field(
        default=0,
        metadata=flag(  # 0: memory.prompt_cache_bytes
            "bytes the prompt cache may hold per rank; default: half the memory left after the weights (the headroom "
            "`doctor` reports), the smallest of all ranks"
        ),
    )
    max_prompt_tokens: int = field(
        default=0,
        metadata=flag(  # 0: the model's context length less max_tokens
            "longer prompts are refused (error too_long) before any work; default: the model's context length less "
            "the largest token budget (--max-tokens, or the max effort's)"
        ),
    )
    eager_decode: bool = field(
        default=False,
        metadata=flag("decode with mlx-lm's own step instead of the compiled one (backend/decode.py, docs/engine.md)"),
    )
    sequential_kda: bool = field(
        default=False,
        metadata=flag("read prompts through KDA layers with mlx-lm's token loop instead of in chunks (backend/kda.py)"),
    )
    one_stream: bool = field(
        default=False,
        metadata=flag("decode on one CPU stream, a long attention included (backend/decode.py, docs/engine.md)"),
    )
    loop_span: int = 64  # tokens a repetition must cover to count as a loop
    loop_max_period: int = 16  # longest repeated block the loop guard looks for
    trust_remote_code: bool = field(
        default=False,
        metadata=flag(
            "run the Python code a checkpoint ships (the released Kimi K3 tokenizer class); without it such a "
            "checkpoint is refused"
        ),
    )


@dataclass
class GenRequest:
    rid: int  # unique per engine
    prompt: list[int]  # full rendered prompt token ids
    segments: list[int]  # token offsets (ascending, <= len(prompt)) where prompt caches are worth storing
    max_tokens: int
    temp: float
    top_p: float
    seed: int  # per-request sampler seed (identical on every rank)
    priority: int = 0  # Priority.rank of the request: interactive (0) before background (1)
    owner: str = ""  # whose request: its file contexts and continuations are cached for it alone (prompt_cache.py)
    about: About | None = None  # what it is for (the agent's unit, kind, round): what the engine's hooks go by


class Finish(StrEnum):
    """How a generation ended: the model's end-of-message token, its token budget, the loop guard, a cancel, or
    an error (:class:`Failed` says which)."""

    STOP = "stop"
    LENGTH = "length"
    LOOP = "loop"
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(frozen=True)
class Failed:
    """Why a generation finished with :attr:`Finish.ERROR`: TOO_LONG (refused before any work, the prompt is
    longer than max_prompt_tokens), FAILED (a step of it raised, on this rank or another) or INTERNAL (the
    request itself was malformed: a fault of the daemon's code), and what was wrong."""

    code: ErrorCode
    message: str


@dataclass
class GenEvent:
    rid: int
    text: str  # newly detokenized text since the last event (may be "")
    finish: Finish | None = None  # None while running
    # on finish: prompt_tokens, cached_tokens, generated_tokens, batch_size_peak, prefill_step, prefill_chunks
    stats: dict | None = None
    progress: tuple[str, int, int] | None = None  # ("prefill", tokens read, of) or ("decode", generated, budget)
    # on finish: every token id generated, the stop token included (what the prompt cache stored after the
    # prompt), so a continuation can append exactly what the model produced
    tokens: list[int] | None = None
    error: Failed | None = None  # with finish ERROR


def local_checkpoint(model: str) -> Path:
    """The directory a ``--model`` names: itself, or the Hugging Face snapshot ``load`` downloaded."""
    path = Path(model)
    return path if path.exists() else hf_repo_to_path(model)


def _config(model: str) -> dict:
    return json.loads((local_checkpoint(model) / "config.json").read_text(encoding="utf-8"))


@dataclass
class Outcome:
    """What a rank's last step did that every rank must agree on; exchanged before the next step."""

    failed: dict[int, str] = field(default_factory=dict)  # rid -> why: requests that failed in that step
    digest: str = ""  # the engine's state when that step started (after its cancels and failures)


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


@dataclass
class _Live:
    """An admitted request: reading its prompt (``reading``) or decoding in the BatchGenerator (``uid``)."""

    req: GenRequest
    cached: int
    reading: prefill.Reading | None
    chunk: int
    sampler: object
    processors: list
    detokenizer: object
    loop: LoopDetector
    uid: int | None = None
    chunks: int = 0  # prefill chunks read
    generated: list[int] = field(default_factory=list)
    batch_peak: int = 0

    def stats(self) -> dict:
        return {
            "prompt_tokens": len(self.req.prompt),
            "cached_tokens": self.cached,
            "generated_tokens": len(self.generated),
            "batch_size_peak": self.batch_peak,
            "prefill_step": self.chunk,
            "prefill_chunks": self.chunks,
        }


@dataclass
class _Counters:
    # tokens by kind: "prompt" (admitted), "cached" (of those, found in the prompt cache), "prefilled" (read by
    # our chunks), "generated"
    tokens: Counter = field(default_factory=Counter)
    busy_seconds: float = 0.0
    batch_peak: int = 0
    steps: int = 0
    finishes: FinishCounter = field(default_factory=FinishCounter)
    # seconds spent per phase of step(): "admit" (ends, admission), "prefill" (our chunks), "decode" (mlx-lm's
    # BatchGenerator.next: the forward pass and sampling), "tokens" (ours per token: detokenizer, loop guard,
    # finishes, events), "sync" (a pair waits for the decode step before the next exchange)
    phases: Counter = field(default_factory=lambda: Counter(dict.fromkeys(PHASES, 0.0)))


class Engine:
    """Continuous batching over one loaded model; see the module docstring."""

    def __init__(self, args: EngineArgs, model=None, tokenizer=None, group=None, hooks: EngineHooks | None = None):
        """``hooks``: scripted answers and failures (backend/hooks.py), None in production."""
        self.args = args
        self.hooks = hooks
        mlx_internals.read_kda_in_chunks(not args.sequential_kda)
        self.ranks = group.size() if group is not None else 1
        if model is None or tokenizer is None:
            model, tokenizer = dist.load_model(args.model, group, trust_remote_code=args.trust_remote_code)
        self.model, self.tokenizer = model, tokenizer
        text = getattr(model.args, "text_config", model.args)
        self.model_id = Path(args.model).name or args.model
        self.fingerprint = checkpoint_fingerprint(local_checkpoint(args.model))  # what results are cached under
        self.experts = int(getattr(text, "num_experts", None) or 0)
        self.random_weights = says_random_weights(_config(args.model))  # the welcome says so (k3lsp eval)
        self.layers = int(text.num_hidden_layers)
        self.vocab_size = int(text.vocab_size)
        self.context_length = int(getattr(text, "max_position_embeddings", 0) or 0)
        self.max_prompt_tokens = args.max_prompt_tokens or max(1, self.context_length - args.max_tokens)
        self.eos = min(tokenizer.eos_token_ids)
        self.prompt_cache_bytes = args.prompt_cache_bytes or _default_cache_bytes(model, group)
        self._cache = PromptCache(args.prompt_cache_size, self.prompt_cache_bytes)
        self._gen = self._new_generator()
        self._queue: list[tuple[int, int, GenRequest]] = []
        self._order = 0
        self._rejected: list[GenEvent] = []
        self._ends: dict[int, tuple[str, str | None, str | None]] = {}  # rid -> (finish, code, error) to apply
        self._live: dict[int, _Live] = {}
        self._uid_to_rid: dict[int, int] = {}
        self._continuations: dict[int, tuple[str, list[int]]] = {}  # rid -> the continuation entry it stored
        self._failed: dict[int, str] = {}
        self._digest = ""
        self._n = _Counters()

    def _new_generator(self):
        concurrency = max(1, self.args.max_concurrency)
        options = {
            "max_tokens": self.args.max_tokens,
            "stop_tokens": [[t] for t in sorted(self.tokenizer.eos_token_ids)],
            "completion_batch_size": concurrency,
            "prefill_batch_size": min(concurrency, 8),
            "prefill_step_size": self.args.prefill_step_size,
        }
        compiled, two_streams = not self.args.eager_decode, not self.args.one_stream
        return mlx_internals.decode_generator(self.model, compiled=compiled, two_streams=two_streams, **options)

    # --- the daemon's interface ------------------------------------------------------------------------------

    def warmup(self) -> None:
        """Generate a few tokens for two batched requests so the CPU/GPU kernels are compiled now."""
        prompt = self.tokenizer.encode("int main(void) { return 0; }")
        for rid in (-1, -2):
            self.submit(GenRequest(rid, prompt, [], 4, self.args.temp, self.args.top_p, seed=-rid))
        self.run_until_idle(64)
        self._cache.clear()
        self._continuations.clear()
        self._failed.clear()
        self._n = _Counters()

    def submit(self, req: GenRequest) -> None:
        """Queue a request; one that cannot run (malformed, or too long) finishes with "error" at the next step."""
        if req.rid in self._live or any(q[2].rid == req.rid for q in self._queue):
            raise ValueError(f"request id {req.rid} is already in the engine")
        try:
            problem = self._check(req)
        except TypeError as e:  # fields of the wrong type altogether
            problem = (ErrorCode.INTERNAL, f"malformed request: {e}")
        if problem:
            self._rejected.append(self._finish_queued(req, "error", *problem))
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
        """Finish ``rid`` with "cancelled" at the next step (queued, reading or decoding)."""
        self._ends.setdefault(rid, ("cancelled", None, None))

    def fail(self, rid: int, error: str) -> None:
        """Finish ``rid`` with "error" (code FAILED) at the next step: another rank failed it."""
        self._ends[rid] = ("error", ErrorCode.FAILED, error)

    def release(self, rid: int) -> None:
        """The conversation ``rid`` belonged to is over: its continuation entry is worth nothing now."""
        entry = self._continuations.pop(rid, None)
        if entry is not None:
            self._cache.drop(self.model_id, *entry)

    def clear_prompt_cache(self) -> None:
        """Forget every stored prefix (the ranks disagreed about one: start again from the same state)."""
        self._cache.clear()
        self._continuations.clear()

    def abandon(self, error: str) -> list[GenEvent]:
        """A step raised although it contains every failure it knows of: nothing it held can be trusted, so
        every request fails (and is reported by ``outcome()``) and the BatchGenerator starts empty."""
        self._gen = self._new_generator()
        self._ends.clear()
        events = [self._finish_queued(req, "error", ErrorCode.FAILED, error) for _, _, req in sorted(self._queue)]
        self._queue.clear()
        events += [self._finish(live, "error", ErrorCode.FAILED, error) for live in list(self._live.values())]
        self._failed.update((event.rid, error) for event in events)
        return events

    def busy(self) -> bool:
        return bool(self._queue or self._live or self._rejected or self._ends)

    def outcome(self) -> Outcome:
        """The failures of the steps since the last call, and the digest of the last step's starting state."""
        failed, self._failed = self._failed, {}
        return Outcome(failed, self._digest)

    def step(self) -> list[GenEvent]:
        """One scheduling step. Events come for requests with new text, progress or a finish; never raises
        for a bad request (it finishes with ERROR, its ``error`` saying why)."""
        tic = time.perf_counter()
        phases = self._n.phases
        events, self._rejected = self._rejected, []
        events += self._apply_ends()
        self._n.steps += 1
        if self.ranks > 1:  # only ranks that compare their states need it (one rank: Outcome.digest stays "")
            self._digest = self._state_digest()
        events += self._admit()
        mark = time.perf_counter()
        phases["admit"] += mark - tic
        if self._live:
            with mx.stream(generation_stream):  # one stream for all model work: its collectives stay in order
                events += self._read()
            phases["prefill"] += time.perf_counter() - mark
            events += self._decode()
            if self.ranks > 1:  # the next step's exchange must not run while this step's decode is in flight
                mark = time.perf_counter()
                mx.synchronize(generation_stream)
                phases["sync"] += time.perf_counter() - mark
        self._n.busy_seconds += time.perf_counter() - tic
        return events

    def stats(self) -> dict:
        n = self._n
        reading = sum(live.reading is not None for live in self._live.values())
        return {
            "active": len(self._live),
            "decoding": len(self._live) - reading,
            "prefilling": reading,
            "queued": len(self._queue),
            "prompt_tokens": n.tokens["prompt"],
            "cached_tokens": n.tokens["cached"],
            "prefilled_tokens": n.tokens["prefilled"],
            "tokens_generated": n.tokens["generated"],
            "steps": n.steps,
            "tokens_per_s": n.tokens["generated"] / n.busy_seconds if n.busy_seconds else 0.0,
            "batch_size_peak": n.batch_peak,
            "loops": n.finishes.counts["loop"],
            "stop_tokens": n.finishes.counts["stop"],
            "prompt_cache_entries": len(self._cache),
            "prompt_cache_bytes": self._cache.nbytes,
            "prompt_cache_limit_bytes": self.prompt_cache_bytes,
            "prompt_cache": self._cache.kinds(),
            "max_prompt_tokens": self.max_prompt_tokens,
            "step_seconds": {phase: round(seconds, 4) for phase, seconds in n.phases.items()},
            **n.finishes.summary(),
        }

    # --- admission ---------------------------------------------------------------------------------------------

    def _check(self, req: GenRequest) -> tuple[str, str] | None:
        """(code, why) a request cannot run, or None."""
        if not req.prompt:
            return ErrorCode.INTERNAL, "empty prompt"
        if not self._ids(req.prompt):
            return ErrorCode.INTERNAL, f"prompt tokens must be ids in 0..{self.vocab_size - 1}"
        if not isinstance(req.max_tokens, int) or req.max_tokens < 1:
            return ErrorCode.INTERNAL, f"max_tokens must be a positive integer, got {req.max_tokens!r}"
        if not isinstance(req.seed, int) or not isinstance(req.priority, int):
            return ErrorCode.INTERNAL, f"seed and priority must be integers, got {req.seed!r} and {req.priority!r}"
        if not (req.temp >= 0 and 0 <= req.top_p <= 1):
            return ErrorCode.INTERNAL, f"need temp >= 0 and 0 <= top_p <= 1, got temp={req.temp} top_p={req.top_p}"
        if any(not isinstance(s, int) or not 0 < s <= len(req.prompt) for s in req.segments):
            return ErrorCode.INTERNAL, f"segments must be offsets in 1..{len(req.prompt)}, got {req.segments}"
        if len(req.prompt) > self.max_prompt_tokens:
            return ErrorCode.TOO_LONG, (
                f"the prompt has {len(req.prompt)} tokens; this daemon reads at most "
                f"{self.max_prompt_tokens} (--max-prompt-tokens)"
            )
        return None

    def _ids(self, tokens: list) -> bool:
        return all(isinstance(t, int) and 0 <= t < self.vocab_size for t in tokens)

    def _apply_ends(self) -> list[GenEvent]:
        """Finish the requests cancelled or failed since the last step, wherever they are."""
        if not self._ends:
            return []
        ends, self._ends = self._ends, {}
        events = []
        queued = [q[2] for q in self._queue if q[2].rid in ends]
        if queued:
            self._queue = [q for q in self._queue if q[2].rid not in ends]
            heapq.heapify(self._queue)
            events += [self._finish_queued(req, *ends[req.rid]) for req in queued]
        running = sorted(rid for rid in ends if rid in self._live)
        in_generator = [self._live[rid].uid for rid in running if self._live[rid].uid is not None]
        if in_generator:
            self._gen.remove(in_generator)
        events += [self._finish(self._live[rid], *ends[rid]) for rid in running]
        return events

    def _finish_queued(
        self, req: GenRequest, reason: str, code: str | None = None, error: str | None = None
    ) -> GenEvent:
        """End a request that was never admitted."""
        self._n.finishes.add(reason)
        prompt_tokens = len(req.prompt) if isinstance(req.prompt, list) else 0
        stats = {
            "prompt_tokens": prompt_tokens,
            "cached_tokens": 0,
            "generated_tokens": 0,
            "batch_size_peak": 0,
            "prefill_step": 0,
            "prefill_chunks": 0,
        }
        return GenEvent(req.rid, "", Finish(reason), stats, error=failed(code, error))

    def _admit(self) -> list[GenEvent]:
        """Start queued requests, interactive first; background ones never take the reserved slots
        (but always get at least one), so a request for the document being edited never waits
        for a workspace audit to finish. A request whose prompt starts with a segment another request
        is reading right now waits until that one has stored it (a step or two), then reads only the rest:
        the units of a file sent together read the file's shared context once, not once each."""
        events, waiting = [], []
        background_limit = max(1, self.args.max_concurrency - self.args.interactive_reserve)
        while self._queue and len(self._live) < self.args.max_concurrency:
            priority, _, req = self._queue[0]
            if priority > 0 and len(self._live) >= background_limit:
                break
            entry = heapq.heappop(self._queue)
            if self._reading_shared_prefix(req):
                waiting.append(entry)
                continue
            try:
                self._start(req)
            except Exception as e:  # one bad request must not stop the others
                log.exception("request %s could not be admitted", req.rid)
                self._failed[req.rid] = f"{type(e).__name__}: {e}"
                events.append(self._finish_queued(req, "error", ErrorCode.FAILED, self._failed[req.rid]))
        for entry in waiting:
            heapq.heappush(self._queue, entry)
        return events

    def _reading_shared_prefix(self, req: GenRequest) -> bool:
        """Whether a request being read will store a segment ``req`` starts with, and has not yet."""
        for live in self._live.values():
            reading = live.reading
            if reading is None:
                continue
            mine = live.req.owner == req.owner  # another's file context would not be shared: no wait for it
            for s in req.segments:
                shared = reading.stops.get(s) == SYSTEM or (s in reading.stops and mine)
                if shared and reading.pos < s and req.prompt[:s] == reading.prompt[:s]:
                    return True
        return False

    def _start(self, req: GenRequest) -> None:
        """Admit a request: take the longest stored prefix of ``prompt[:-1]`` (a cache must leave at least
        one token to feed, and cannot be trimmed) and read the rest chunk by chunk from the next step."""
        prompt = req.prompt
        cache, cached = self._cache.fetch(self.model_id, req.owner, prompt[:-1])
        if cache is None:
            cache = make_prompt_cache(self.model)
        end = len(prompt) - 1
        stops = {s: SYSTEM if i == 0 else CONTEXT for i, s in enumerate(req.segments) if cached < s <= end}
        chunk = prefill.chunk_for(self.args.prefill_step_size, len(prompt), self.args.prefill_context)
        reading = prefill.Reading(prompt, cache, cached, end, chunk, stops)
        answer = self.hooks.answer(req, self.tokenizer) if self.hooks is not None else None
        if answer is not None and not self._ids(answer):
            raise ValueError(f"the hooks' answer must be token ids in 0..{self.vocab_size - 1}")
        processors = [decode.Forcing(answer, self.eos)] if answer is not None else []
        self._live[req.rid] = _Live(
            req,
            cached,
            reading,
            chunk,
            seeded_sampler(req.temp, req.top_p, req.seed),
            processors,
            self.tokenizer.detokenizer,
            LoopDetector(self.args.loop_span, self.args.loop_max_period),
        )
        self._n.tokens["prompt"] += len(prompt)
        self._n.tokens["cached"] += cached

    # --- one step ----------------------------------------------------------------------------------------------

    def _read(self) -> list[GenEvent]:
        """One chunk of every request still reading its prompt, those with the same chunk size together;
        then every request that is read joins the BatchGenerator."""
        groups: dict[int, list[_Live]] = {}
        for live in self._live.values():
            if live.reading is not None and not live.reading.done:
                groups.setdefault(live.chunk, []).append(live)
        events: list[GenEvent] = []
        for group in groups.values():
            events += [self._after_chunk(live) for live in self._read_group(group, events)]
        for live in list(self._live.values()):
            if live.reading is not None and live.reading.done:
                try:
                    self._to_decoder(live)
                except Exception as e:
                    events.append(self._fail_now(live, "joining the batch", e))
        return events

    def _read_group(self, group: list[_Live], events: list[GenEvent]) -> list[_Live]:
        """One chunk of every request of ``group`` in one pass; the ones read. If the pass fails, each request
        of a larger group is read alone, so the one that fails on its own fails alone (its event in ``events``)."""
        try:
            self._read_pass(group)
            return group
        except Exception as e:
            if len(group) == 1:
                events.append(self._fail_now(group[0], "prefill", e))
                return []
        done = []
        for live in group:
            try:
                self._read_pass([live])
                done.append(live)
            except Exception as e:
                events.append(self._fail_now(live, "prefill", e))
        return done

    def _read_pass(self, group: list[_Live]) -> None:
        """One prefill pass over ``group``, the hooks asked first (one may fail a request here)."""
        if self.hooks is not None:
            for live in group:
                self.hooks.reading(live.req)
        prefill.read(self.model, [live.reading for live in group])

    def _after_chunk(self, live: _Live) -> GenEvent:
        reading = live.reading
        live.chunks += 1
        self._n.tokens["prefilled"] += reading.last
        kind = reading.stops.get(reading.pos)
        if kind is not None:
            self._keep(live.req.owner, reading.prompt[: reading.pos], reading.cache, kind)
        return GenEvent(live.req.rid, "", progress=("prefill", reading.pos, reading.end))

    def _to_decoder(self, live: _Live) -> None:
        """Hand a read prompt to the BatchGenerator, its last token still to feed."""
        reading, req = live.reading, live.req
        (uid,) = self._gen.insert_segments(
            [[reading.prompt[reading.end :]]],
            max_tokens=[req.max_tokens],
            caches=[reading.cache],
            all_tokens=[reading.prompt[: reading.end]],
            samplers=[live.sampler],
            logits_processors=[live.processors],
        )
        live.uid, live.reading = uid, None
        self._uid_to_rid[uid] = req.rid

    def _decode(self) -> list[GenEvent]:
        if not any(live.uid is not None for live in self._live.values()):
            return []
        tic = time.perf_counter()
        try:
            _, responses = self._gen.next()
        except Exception as e:  # the batch is unusable: fail the requests decoding in it, keep serving
            log.exception("decode step failed")
            self._gen = self._new_generator()
            return [self._fail_now(live, "decode", e) for live in list(self._live.values()) if live.uid is not None]
        mark = time.perf_counter()
        self._n.phases["decode"] += mark - tic
        try:
            return self._tokens(responses)
        finally:
            self._n.phases["tokens"] += time.perf_counter() - mark

    def _tokens(self, responses: list) -> list[GenEvent]:
        """Our work on one decode step's tokens: each request's text, loop guard, finish and event."""
        batch = len(responses)
        self._n.batch_peak = max(self._n.batch_peak, batch)
        events, ended = [], []
        for r in responses:
            live = self._live.get(self._uid_to_rid.get(r.uid))
            if live is None:
                continue
            try:
                event = self._on_token(live, r, batch)
            except Exception as e:
                if live.req.rid not in self._live:
                    log.exception("request %s failed after it finished", live.req.rid)
                    continue
                event = self._fail_now(live, "after a token", e)
                ended.append(live.uid)
            if event.finish == "loop":
                ended.append(live.uid)
            if event.text or event.finish or event.progress:
                events.append(event)
        if ended:
            self._gen.remove(ended)
        return events

    def _fail_now(self, live: _Live, where: str, e: Exception) -> GenEvent:
        """A step of this request raised: it ends with "error" here, and outcome() tells the other ranks. A
        collective that failed (a peer is gone) is no request's fault: it goes up to the scheduler, which ends
        the pair with a rank failure."""
        if self.ranks > 1 and dist.link_error(e):
            raise e
        if where != "decode":
            log.exception("request %s failed in %s", live.req.rid, where, exc_info=e)
        error = f"{where} failed: {type(e).__name__}: {e}"[:500]
        self._failed[live.req.rid] = error
        return self._finish(live, "error", ErrorCode.FAILED, error)

    def _on_token(self, live: _Live, r, batch: int) -> GenEvent:
        live.generated.append(r.token)
        live.batch_peak = max(live.batch_peak, batch)
        self._n.tokens["generated"] += 1
        detok = live.detokenizer
        if r.finish_reason == "stop":  # the stop token itself is not text
            detok.finalize()
            return self._finish(live, "stop", text=detok.last_segment, cache=(r.all_tokens, r.prompt_cache))
        detok.add_token(r.token)
        if r.finish_reason == "length":
            detok.finalize()
            return self._finish(live, "length", text=detok.last_segment, cache=(r.all_tokens, r.prompt_cache))
        if live.loop.add(r.token):
            detok.finalize()
            return self._finish(live, "loop", text=detok.last_segment)
        progress = None
        generated = len(live.generated)
        if generated == 1 or generated % DECODE_PROGRESS_EVERY == 0:
            progress = ("decode", generated, live.req.max_tokens)
        return GenEvent(live.req.rid, detok.last_segment, progress=progress)

    def _finish(
        self, live: _Live, reason: str, code: str | None = None, error: str | None = None, text: str = "", cache=None
    ) -> GenEvent:
        """End a live request: forget it, count it, and keep its cache (prompt + generation)."""
        rid = live.req.rid
        del self._live[rid]
        self._uid_to_rid.pop(live.uid, None)
        self._n.finishes.add(reason)
        event = GenEvent(
            rid, text, Finish(reason), live.stats(), tokens=list(live.generated), error=failed(code, error)
        )
        if cache is not None and cache[1] is not None:
            tokens = list(cache[0])
            if self._keep(live.req.owner, tokens, cache[1], CONTINUATION):
                self._continuations[rid] = (live.req.owner, tokens)
                while len(self._continuations) > 4 * self.args.prompt_cache_size:  # never released: forget
                    del self._continuations[next(iter(self._continuations))]
        return event

    def _keep(self, owner: str, tokens: list[int], cache, kind: str) -> bool:
        """Store a prompt cache; a failure costs only a later cache miss, never a request its finish."""
        try:
            self._cache.store(self.model_id, owner, tokens, cache, kind)
            return True
        except Exception:
            log.exception("could not keep a %s prompt cache of %d tokens", kind, len(tokens))
            return False

    def _state_digest(self) -> str:
        """What every rank in lockstep has identically at the start of a step."""
        live = tuple((rid, len(x.generated), x.reading.pos if x.reading else -1) for rid, x in self._live.items())
        state = (self._n.steps, live, sorted(q[2].rid for q in self._queue), len(self._cache), self._cache.nbytes)
        return hashlib.blake2b(repr(state).encode(), digest_size=8).hexdigest()


def _default_cache_bytes(model, group) -> int:
    """memory.prompt_cache_bytes for this rank's weights; on several ranks the smallest of them, since every
    rank must evict the same entries."""
    weights = sum(x.nbytes for _, x in tree_flatten(model.parameters()))
    budget = memory.prompt_cache_bytes(weights)
    return min(dist.gather(budget, group)) if group is not None and group.size() > 1 else budget


def failed(code: str | None, error: str | None) -> Failed | None:
    """The failure a finish carries: an error's words, under ``code`` (FAILED when none is named)."""
    return Failed(ErrorCode(code or ErrorCode.FAILED), error) if error else None
