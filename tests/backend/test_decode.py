"""The compiled decode step (backend/decode.py) against mlx-lm's own step, on the real tiny kimi_k3: the same tokens
and bitwise the same caches through joins, finishes and growing KV buffers; its traces are reused, not made anew
every step; a batch it does not fit decodes with mlx-lm's step."""

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_logits_processors

from backend import decode, dist, mlx_internals
from backend.engine import seeded_sampler

EOS = 3


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """make-tiny's own 4-layer checkpoint, not the tests' 3-layer one: the joins and finishes below are placed
    where its random weights' greedy sequences end (on eos, or at their budget)."""
    from backend.tiny import make_tiny

    path = make_tiny(tmp_path_factory.mktemp("decode") / "tiny")
    return dist.load_model(str(path), None, trust_remote_code=True)[0]


def prompt(i: int, n: int) -> list[int]:
    return [(7 * i + 3 * j) % 500 + 8 for j in range(n)]


class Recorder:
    """A sampler shared by a generator's every sequence that keeps the log-probabilities it was given (mlx-lm's
    step and a compiled step that does not sample in its graph hand one shared sampler the whole batch)."""

    def __init__(self):
        self.seen: list[mx.array] = []

    def __call__(self, logprobs: mx.array) -> mx.array:
        self.seen.append(logprobs)
        return mx.argmax(logprobs, axis=-1)


def lockstep(model, joins: dict[int, list], steps: int, record: bool = False) -> tuple[decode.Generator, list]:
    """Drive mlx-lm's BatchGenerator and decode.Generator with the same requests and compare every step's tokens
    and every finished sequence's cache, bitwise (``record``: also every step's log-probabilities, through a
    Recorder as every sequence's sampler). ``joins``: step -> functions each making one request's insert()
    arguments (called once per generator: samplers and scripts count their own position). Returns the compiled
    generator and the steps' (uid, token, finish) lists."""
    options = {"max_tokens": 1 << 20, "stop_tokens": [[EOS]]}
    gens = [
        BatchGenerator(model, **options),
        mlx_internals.decode_generator(model, compiled=True, two_streams=True, **options),
    ]
    assert isinstance(gens[1], decode.Generator)  # the installed mlx and mlx-lm are the ones the step was written for
    recorders = [Recorder() for _ in gens]
    seen = []
    for step in range(steps):
        for make in joins.get(step, []):
            for gen, recorder in zip(gens, recorders, strict=True):
                request = {"samplers": recorder} if record else {}
                gen.insert(**{name: [value] for name, value in {**make(), **request}.items()})
        eager, compiled = (gen.next()[1] for gen in gens)
        seen.append([(r.uid, r.token, r.finish_reason) for r in eager])
        assert [(r.uid, r.token, r.finish_reason) for r in compiled] == seen[-1], f"step {step}"
        for a, b in zip(eager, compiled, strict=True):
            if a.finish_reason is not None:
                ours, theirs = ([c.state for c in r.prompt_cache] for r in (b, a))
                pairs = zip(tree_flatten(theirs), tree_flatten(ours), strict=True)
                arrays = [(x, y) for (_, x), (_, y) in pairs if isinstance(x, mx.array)]
                assert arrays and all(mx.array_equal(x, y).item() for x, y in arrays), f"the cache of {a.uid}"
    theirs, ours = (r.seen for r in recorders)
    assert len(theirs) == len(ours) and all(mx.array_equal(a, b).item() for a, b in zip(theirs, ours, strict=True))
    return gens[1], seen


def greedy(i: int, length: int, max_tokens: int):
    return lambda: {"prompts": prompt(i, length), "max_tokens": max_tokens}


@pytest.mark.parametrize("record", [False, True], ids=["greedy-in-the-graph", "log-probabilities-compared"])
def test_decoding_is_bitwise_mlx_lms_through_joins_finishes_and_growing_buffers(model, record):
    # nothing forced: every token is the argmax of the model's own logits, and with ``record`` every step's
    # log-probabilities are compared bit for bit; prompts of different lengths (left padding), sequences joining
    # while others decode and finishing at different steps, each buffer crossing several capacities
    joins = {
        0: [greedy(0, 120, 150), greedy(1, 61, 40)],
        5: [greedy(2, 90, 100)],
        30: [greedy(i, 40 + 17 * i, 60 + 9 * i) for i in range(3, 8)],
        95: [greedy(9, 1, 30)],  # a one-token prompt: an empty cache to start from
    }
    compiled, seen = lockstep(model, joins, 170, record)
    assert sum(map(len, seen)) > 600
    shapes = [shape for _, shape in compiled._generation_batch._traces]
    batch_sizes = {shape[0][0] for shape in shapes}
    capacities = {s[2] for shape in shapes for s in shape if len(s) == 4 and s[1] == 1}  # (batch, 1, capacity, dim)
    assert len(batch_sizes) >= 4 and len(capacities) >= 3  # the compiled step ran, at many shapes
    assert len(shapes) < 40  # a trace serves many steps (CAPACITY_STEP positions of one batch size)


def test_attention_split_over_two_streams_is_bitwise_mlx_lms(model, monkeypatch):
    # every compiled step of two or more sequences splits its attention in halves of the batch (the threshold at
    # one score), down to two; log-probabilities compared bit for bit
    monkeypatch.setattr(decode, "SPLIT_SCORES", 1)
    stream, splits = decode._second_stream(), []
    monkeypatch.setattr(decode, "_second_stream", lambda: splits.append(1) or stream)
    joins = {0: [greedy(0, 120, 110), greedy(1, 61, 40)], 5: [greedy(2, 90, 60)], 20: [greedy(3, 1, 30)]}
    compiled, seen = lockstep(model, joins, 112, record=True)
    assert [len(step) for step in seen[-5:]] == [1] * 5  # the last steps decode one sequence alone: not split
    batch_sizes = [shape[0][0] for _, shape in compiled._generation_batch._traces]
    assert {1, 2, 3} <= set(batch_sizes)
    assert len(splits) == sum(b > 1 for b in batch_sizes)  # one MLA layer: one split attention per trace


def test_one_stream_splits_nothing(model, monkeypatch):
    monkeypatch.setattr(decode, "SPLIT_SCORES", 1)
    monkeypatch.setattr(decode, "_second_stream", lambda: pytest.fail("split on one stream"))
    gen = mlx_internals.decode_generator(
        model, compiled=True, two_streams=False, max_tokens=1 << 20, stop_tokens=[[EOS]]
    )
    gen.insert(prompts=[prompt(0, 50), prompt(1, 30)], max_tokens=[20, 20])
    tokens = sum(len(gen.next()[1]) for _ in range(25))
    assert tokens == 40
    assert gen._generation_batch._traces  # the compiled step ran


def test_forced_and_seeded_rows_sample_as_with_mlx_lms_step(model):
    # the engine's own requests: scripted answers (Forcing), seeded sampling at temperature 1 and greedy ones
    script = prompt(5, 50)

    def forced():
        return {"prompts": prompt(1, 33), "max_tokens": 80, "logits_processors": [decode.Forcing(script, EOS)]}

    def seeded(i: int, temp: float, top_p: float, seed: int):
        return lambda: {"prompts": prompt(i, 45 + i), "max_tokens": 60, "samplers": seeded_sampler(temp, top_p, seed)}

    joins = {0: [seeded(0, 1.0, 0.95, 7), forced, greedy(3, 20, 70)], 3: [seeded(2, 0.7, 1.0, -3)]}
    compiled, seen = lockstep(model, joins, 90)
    assert [t for step in seen for uid, t, _ in step if uid == 1] == [*script, EOS]  # the script, then the stop
    assert compiled._generation_batch._traces  # decoded by the compiled step


def test_a_processor_it_does_not_know_takes_mlx_lms_step(model):
    bias = make_logits_processors(logit_bias={EOS: -100.0})
    joins = {0: [lambda: {"prompts": prompt(0, 40), "max_tokens": 30, "logits_processors": bias}]}
    compiled, seen = lockstep(model, joins, 32)
    assert sum(map(len, seen)) == 30 and not compiled._generation_batch._traces
