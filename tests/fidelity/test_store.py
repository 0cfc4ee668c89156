"""A corrupt, incomplete or mismatched BASE is refused with a message that says what is wrong."""

import hashlib
import json
import shutil

import numpy as np
import pytest

from backend.fidelity.compare import compare
from backend.fidelity.store import _TAIL, MAGIC, TRAILER, Base, BaseError
from backend.tiny import VOCAB_SIZE
from tests.fidelity.conftest import WINDOW


@pytest.fixture
def copy(tiny_base, tmp_path):
    path = tmp_path / "copy.k3fb"
    shutil.copy(tiny_base, path)
    return path


def _reseal(path):
    """Recompute the trailer, as a tool that edits a BASE 'carefully' would."""
    data = path.read_bytes()[:-_TAIL]
    path.write_bytes(data + TRAILER + hashlib.sha256(data).digest())


def _header_end(path) -> int:
    data = path.read_bytes()
    return len(MAGIC) + 12 + int(np.frombuffer(data, "<u8", 1, len(MAGIC) + 4)[0])


def test_the_recorded_base_reads_back(tiny_base):
    base = Base(tiny_base)
    records = base.records(0)
    assert len(records) == base.header.windows[0].tokens - 1
    lps = np.asarray(records["logprobs"])
    assert np.all(np.diff(lps, axis=1) <= 0)  # top-k descending
    total = np.logaddexp(np.log(np.exp(lps.astype(np.float64)).sum(axis=1)), records["rest"])
    assert np.allclose(total, 0.0, atol=1e-4)  # top-k + rest is the whole distribution


def test_not_a_base(tmp_path):
    path = tmp_path / "x.k3fb"
    path.write_bytes(b"hello world, this is not a BASE at all")
    with pytest.raises(BaseError, match="not a fidelity BASE file"):
        Base(path)


def test_truncated(copy):
    copy.write_bytes(copy.read_bytes()[:-100])
    with pytest.raises(BaseError, match=r"corrupt BASE: .* the header describes"):
        Base(copy)


def test_flipped_byte(copy):
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x40
    copy.write_bytes(bytes(data))
    with pytest.raises(BaseError, match="checksum mismatch"):
        Base(copy)


def test_other_format_version(copy):
    data = bytearray(copy.read_bytes())
    data[len(MAGIC)] = 99
    copy.write_bytes(bytes(data))
    with pytest.raises(BaseError, match="format version 99"):
        Base(copy)


def test_unfinished_recording(tmp_path):
    (tmp_path / "b.k3fb.partial").write_bytes(MAGIC)
    with pytest.raises(BaseError, match="did not finish"):
        Base(tmp_path / "b.k3fb")


def test_window_tokens_changed_behind_a_valid_checksum(copy):
    data = bytearray(copy.read_bytes())
    start = _header_end(copy)  # window 0's ids come first
    data[start] ^= 1  # another token id
    copy.write_bytes(bytes(data))
    _reseal(copy)
    with pytest.raises(BaseError, match=r"window 0 .* does not match its recorded hash"):
        Base(copy)


def test_corrupt_header(copy):
    data = bytearray(copy.read_bytes())
    header_start = len(MAGIC) + 12
    data[header_start] = ord("[")  # still the same length, no longer the header object
    copy.write_bytes(bytes(data))
    _reseal(copy)
    with pytest.raises(BaseError, match="corrupt BASE header"):
        Base(copy)


def test_other_tokenizer_is_refused(tiny_model, tiny_base, tmp_path):
    other = tmp_path / "other-tokenizer"
    shutil.copytree(tiny_model, other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(k for k, v in vocab.items() if v >= 100)[:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(BaseError, match="another tokenizer"):
        compare(str(other), str(tiny_base), trust_remote_code=True)


def test_other_window_is_refused(tiny_model, tiny_base):
    with pytest.raises(BaseError, match=f"recorded with --window {WINDOW}, not 1025"):
        compare(str(tiny_model), str(tiny_base), window=1025, trust_remote_code=True)


def test_cli_reports_a_refused_base_and_exits_2(tiny_model, copy, capsys):
    from backend.cli import main

    copy.write_bytes(copy.read_bytes()[:-1])
    cmd = ["fidelity", "compare", "--trust-remote-code", "--model", str(tiny_model), "--base", str(copy)]
    assert main(cmd) == 2
    assert "k3-backend fidelity:" in capsys.readouterr().err


def test_generate_needs_trace_prompts(tiny_model, corpus_dir, tmp_path):
    from backend.fidelity.record import record

    base = record(
        str(tiny_model),
        str(tmp_path / "code.k3fb"),
        corpora=[str(corpus_dir)],
        window=256,
        top_k=8,
        trust_remote_code=True,
    )
    with pytest.raises(BaseError, match="--generate needs trace sessions"):
        compare(str(tiny_model), str(base), generate=1, trust_remote_code=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "nothing to record"),
        ({"window": 1}, "at least 2 tokens"),
        ({"top_k": VOCAB_SIZE}, f"--top-k must be in 1..{VOCAB_SIZE - 1}"),
        ({"corpora": ["/nonexistent/dir"]}, "must be a directory"),
    ],
)
def test_record_refuses_bad_arguments_and_writes_nothing(tiny_model, trace_file, tmp_path, kwargs, message):
    from backend.fidelity.record import record

    args = {"traces": str(trace_file)} | kwargs if kwargs else {}
    with pytest.raises(ValueError, match=message):
        record(str(tiny_model), str(tmp_path / "b.k3fb"), trust_remote_code=True, **args)
    assert list(tmp_path.iterdir()) == []
