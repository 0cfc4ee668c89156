"""The chunked delta rule (backend/kda.py) against mlx-lm's token loop: the same outputs and states to float32
rounding for any length, gating, padding, head grouping, decay strength and dtype; the same logits and greedy
tokens on the real tiny kimi_k3; and the engine's switch between the two."""

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models import gated_delta
from mlx_lm.models.cache import make_prompt_cache

from backend import dist, kda, mlx_internals
from backend.engine import Engine, EngineArgs

TOLERANCE = 2e-5  # float32 rounding over a few hundred tokens (outputs and states are of order 1)


@pytest.fixture(autouse=True)
def reading():
    """Each test installs what it compares; whatever was installed before is back afterwards."""
    before = gated_delta.gated_delta_ops
    yield
    gated_delta.gated_delta_ops = before


def inputs(
    seed: int, batch: int, length: int, kv_heads: int, heads: int, vector: bool, strength: float, dtype, dk: int = 16
):
    """The arguments of ``gated_delta_update`` as a KDA layer passes them (q and k normalized as it does)."""
    keys = mx.random.split(mx.random.key(seed), 7)
    dv = 16
    q, k = (mx.random.normal((batch, length, kv_heads, dk), key=keys[i]) for i in (0, 1))
    q, k = gated_delta.normalize_qk(q, k, inv_scale=dk**-0.5, eps=1e-6)
    v = mx.random.normal((batch, length, heads, dv), key=keys[2])
    a = strength * mx.random.normal((batch, length, heads, dk) if vector else (batch, length, heads), key=keys[3])
    b = mx.random.normal((batch, length, heads), key=keys[4])
    a_log = mx.log(mx.random.uniform(1, 16, (heads, 1) if vector else (heads,), key=keys[5]))
    state = mx.random.normal((batch, heads, dv, dk), key=keys[6])
    dt_bias = mx.zeros((heads, dk) if vector else (heads,))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype), a, b, a_log, dt_bias, state


def both(args, mask=None):
    """(token loop, chunked) results of mlx-lm's own ``gated_delta_update`` on the same arguments."""
    results = []
    for enabled in (False, True):
        mlx_internals.read_kda_in_chunks(enabled)
        results.append(gated_delta.gated_delta_update(*args, mask=mask))
        mx.eval(results[-1])
    return results


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 3),
    length=st.integers(2, 3 * kda.chunk_size(16) + 5),
    dk=st.sampled_from([16, 32]),  # chunks of 8 and of 4
    grouped=st.booleans(),
    vector=st.booleans(),
    strength=st.sampled_from([0.1, 1.0, 30.0]),  # 30: decays that underflow to 0 within a chunk
    padded=st.booleans(),
)
def test_chunked_reads_what_the_token_loop_reads(seed, batch, length, dk, grouped, vector, strength, padded):
    args = inputs(seed, batch, length, 2 if grouped else 4, 4, vector, strength, mx.float32, dk)
    lengths = [length - (i * 3 if padded else 0) for i in range(batch)]
    mask = (mx.arange(length)[None] < mx.array([max(1, n) for n in lengths])[:, None]) if padded else None
    (y_loop, s_loop), (y_chunked, s_chunked) = both(args, mask)
    assert y_chunked.shape == y_loop.shape and y_chunked.dtype == y_loop.dtype
    assert mx.abs(s_chunked - s_loop).max().item() < TOLERANCE  # padding leaves the state as it was
    for row, n in enumerate(lengths):  # outputs at padded positions are nobody's
        assert mx.abs(y_chunked[row, : max(1, n)] - y_loop[row, : max(1, n)]).max().item() < TOLERANCE


def test_a_long_prompt_in_bfloat16_and_a_single_token():
    (y_loop, s_loop), (y_chunked, s_chunked) = both(inputs(1, 1, 700, 4, 4, True, 1.0, mx.bfloat16))
    assert y_chunked.dtype == mx.bfloat16 and s_chunked.dtype == mx.float32
    assert mx.abs(s_chunked - s_loop).max().item() < TOLERANCE
    assert mx.abs(y_chunked.astype(mx.float32) - y_loop.astype(mx.float32)).max().item() < 1e-2  # bf16's step
    # one token (a decode step) is mlx-lm's own step: bitwise
    one, ours = both(inputs(2, 2, 1, 4, 4, True, 1.0, mx.float32))
    assert all(mx.array_equal(x, y).item() for x, y in zip(one, ours, strict=True))


def test_the_tiny_model_reads_a_prompt_alike_and_then_decodes_the_same_tokens(tiny_model):
    model = dist.load_model(str(tiny_model), None, trust_remote_code=True)[0]
    prompt = mx.array([[(7 * j) % 500 + 8 for j in range(300)]])
    runs = []
    for enabled in (False, True):
        mlx_internals.read_kda_in_chunks(enabled)
        cache = make_prompt_cache(model)
        logits = model(prompt[:, :200], cache=cache)  # two pieces, as the engine's prefill chunks read it
        logits = mx.concatenate([logits, model(prompt[:, 200:], cache=cache)], axis=1)
        tokens = [mx.argmax(logits[0, -1]).item()]
        for _ in range(20):
            tokens.append(mx.argmax(model(mx.array([[tokens[-1]]]), cache=cache)[0, -1]).item())
        runs.append((logits, tokens))
    (loop_logits, loop_tokens), (chunked_logits, chunked_tokens) = runs
    assert mx.abs(chunked_logits - loop_logits).max().item() < 1e-3
    assert chunked_tokens == loop_tokens


def test_the_engine_reads_in_chunks_unless_told_otherwise(tiny_model):
    loaded = dist.load_model(str(tiny_model), None, trust_remote_code=True)
    Engine(EngineArgs(model=str(tiny_model), trust_remote_code=True, sequential_kda=True), *loaded)
    assert gated_delta.gated_delta_ops is kda.TOKEN_LOOP
    Engine(EngineArgs(model=str(tiny_model), trust_remote_code=True), *loaded)
    assert gated_delta.gated_delta_ops is kda.chunked
