"""Teacher-forced log-probs in chunks: bounded inputs per pass, and the same numbers as one long pass."""

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from backend import dist
from backend.fidelity import forward

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return forward.load(tiny_model, trust_remote_code=True)


class Recording:
    """The model, with the length of every input it is given."""

    def __init__(self, model):
        self.model, self.lengths = model, []

    def make_cache(self):
        return self.model.make_cache()

    def __call__(self, inputs, cache=None):
        self.lengths.append(inputs.shape[1])
        return self.model(inputs, cache=cache)


def test_chunks_are_bounded_and_equal_one_pass(tiny):
    ids = list(tiny.tokenizer.encode((REPO / "examples" / "k3demo_syscalls.c").read_text()))[:700]
    model = Recording(tiny.model)
    chunked = [(start, np.array(lp)) for start, lp in forward.log_probs(model, ids, 64)]
    assert max(model.lengths) == 64 and sum(model.lengths) == len(ids) - 1
    assert [s for s, _ in chunked] == list(range(0, len(ids) - 1, 64))
    whole = np.concatenate([lp for _, lp in chunked])
    ((_, one),) = list(forward.log_probs(tiny.model, ids, len(ids)))
    assert whole.shape == (len(ids) - 1, forward.vocab_size(tiny.model))
    assert np.allclose(whole, np.array(one), atol=1e-4)
    assert np.allclose(np.log(np.exp(whole.astype(np.float64)).sum(axis=1)), 0.0, atol=1e-4)


def test_share_and_share_result_on_one_process():
    group = mx.distributed.init()
    assert dist.share({"a": [1, 2]}, group) == {"a": [1, 2]}
    assert forward.share_result(lambda: 5, group) == 5
    with pytest.raises(ValueError, match="boom"):
        forward.share_result(lambda: (_ for _ in ()).throw(ValueError("boom")), group)
