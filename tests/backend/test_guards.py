"""The loop detector flags periodic tails and only those; finish accounting gives loop rate and stop share."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.guards import FinishCounter, LoopDetector


def first_flag(tokens, **kw) -> int | None:
    """Index of the token at which the detector first fires."""
    det = LoopDetector(**kw)
    return next((i for i, t in enumerate(tokens) if det.add(t)), None)


@pytest.mark.parametrize("period", [1, 2, 5, 16])
def test_fires_when_a_block_repeats_over_the_span(period):
    block = list(range(100, 100 + period))
    prefix = list(range(500, 530))
    tokens = prefix + block * (200 // period)
    # The tail is periodic over `span` tokens exactly when the 64th token of the repeat arrives.
    assert first_flag(tokens, span=64, max_period=16) == len(prefix) + 63


def test_period_longer_than_max_is_allowed():
    block = list(range(17))
    assert first_flag(block * 20, span=64, max_period=16) is None
    det = LoopDetector(span=64, max_period=17)
    assert any(det.add(t) for t in block * 20)
    assert det.period == 17


def test_short_repeats_pass():
    # 63 identical tokens, then a different one, then more: never 64 in a row.
    tokens = ([7] * 63 + [8]) * 10
    assert first_flag(tokens, span=64, max_period=4) is None


def brute_first_loop(tokens, span, max_period):
    """Reference: the first index whose last `span` tokens are p-periodic for some p <= max_period."""
    for i in range(span - 1, len(tokens)):
        tail = tokens[i - span + 1 : i + 1]
        if any(all(tail[j] == tail[j - p] for j in range(p, span)) for p in range(1, max_period + 1)):
            return i
    return None


sequences = st.builds(
    lambda pre, block, k, post: pre + block * k + post,
    st.lists(st.integers(0, 3), max_size=60),
    st.lists(st.integers(0, 3), min_size=1, max_size=8),
    st.integers(0, 12),
    st.lists(st.integers(0, 3), max_size=30),
)


@given(sequences)
def test_agrees_with_brute_force(tokens):
    assert first_flag(tokens, span=20, max_period=6) == brute_first_loop(tokens, 20, 6)


@given(st.lists(st.integers(0, 1000), min_size=0, max_size=300, unique=True))
def test_distinct_tokens_never_loop(tokens):
    assert first_flag(tokens, span=8, max_period=4) is None


def test_rejects_bad_settings():
    with pytest.raises(ValueError):
        LoopDetector(span=8, max_period=8)
    with pytest.raises(ValueError):
        LoopDetector(span=8, max_period=0)


def test_finish_counter_rates():
    c = FinishCounter()
    assert c.summary()["loop_rate"] == 0.0
    for reason in ["stop", "stop", "stop", "loop", "length", "cancelled", "error", "stop"]:
        c.add(reason)
    s = c.summary()
    assert s["generations"] == 8
    assert s["loop_rate"] == 1 / 8 and s["stop_share"] == 4 / 8
    assert s["finish"] == {"stop": 4, "length": 1, "loop": 1, "cancelled": 1, "error": 1}
    with pytest.raises(ValueError):
        c.add("tool_calls")
