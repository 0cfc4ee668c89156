"""Prefill on the real engine and tiny checkpoint: each request reads its prompt in chunks of its own size,
interleaved with everyone's decode; progress per chunk; a failing request fails alone; oversized prompts
are refused before any work."""

import itertools

import pytest

from backend.engine import Engine, EngineArgs, GenRequest
from k3lsp.wire.protocol import ErrorCode
from tests.support.engine import drain
from tests.support.forcing import Forced

rids = itertools.count(1)
FORCED = Forced()  # every engine of this module answers (and fails) by it


@pytest.fixture(scope="module")
def engine(tiny_model):
    # base chunk 512, safe up to 1024 tokens of context: a 3000-token prompt is read in chunks of 256
    e = Engine(
        EngineArgs(
            model=str(tiny_model),
            max_tokens=64,
            prefill_step_size=512,
            prefill_context=1024,
            max_prompt_tokens=4000,
            trust_remote_code=True,
        ),
        hooks=FORCED,
    )
    e.warmup()
    return e


def prompt(engine: Engine, n: int, salt: str) -> list[int]:
    ids = engine.tokenizer.encode(" ".join(f"{salt}{i} = v[{i}];" for i in range(n)))
    assert len(ids) >= n
    return ids[:n]


def request(tokens, forced, **kw) -> GenRequest:
    return FORCED.request(
        next(rids), tokens, kw.pop("segments", []), kw.pop("max_tokens", 64), 1.0, 0.95, seed=7, forced=forced, **kw
    )


def test_a_long_prompt_beside_a_short_one_leaves_the_short_ones_chunk_alone(engine):
    tok = engine.tokenizer
    long = request(prompt(engine, 3000, "l"), tok.encode("long done"))
    short = request(prompt(engine, 700, "s"), tok.encode(" ".join(f"t{i}" for i in range(12))))
    engine.submit(long)
    engine.submit(short)
    reading_while_short_decodes = []

    def watch(n, events):
        texts = {e.rid for e in events if e.text}
        reads = {e.rid for e in events if e.progress and e.progress[0] == "prefill"}
        if short.rid in texts and long.rid in reads:
            reading_while_short_decodes.append(n)

    out = drain(engine, on_step=watch)
    assert out[short.rid].stats["prefill_step"] == 512 and out[short.rid].stats["prefill_chunks"] == 2
    assert out[long.rid].stats["prefill_step"] == 256 and out[long.rid].stats["prefill_chunks"] == 12
    assert out[short.rid].text == " ".join(f"t{i}" for i in range(12)) and out[long.rid].text == "long done"
    assert reading_while_short_decodes  # the long prompt was still being read while the short one decoded


def test_prefill_progress_counts_tokens_read_of_the_total(engine):
    tok = engine.tokenizer
    req = request(prompt(engine, 1000, "p"), tok.encode("ok"), segments=[600])
    engine.submit(req)
    seen = []
    drain(engine, on_step=lambda n, evs: seen.extend(e.progress for e in evs if e.rid == req.rid and e.progress))
    reads = [p for p in seen if p[0] == "prefill"]
    # chunks of 512 that stop at the segment end (600) and before the last token (fed by the first decode step)
    assert reads == [("prefill", 512, 999), ("prefill", 600, 999), ("prefill", 999, 999)]
    assert ("decode", 1, 64) in seen


def test_a_prompt_over_the_limit_is_refused_before_any_work(engine):
    before = engine.stats()["prefilled_tokens"]
    big = request(prompt(engine, 4001, "b"), None)
    ok = request(prompt(engine, 50, "o"), engine.tokenizer.encode("fine"))
    engine.submit(big)
    engine.submit(ok)
    out = drain(engine)
    assert out[big.rid].finish == "error" and out[big.rid].error.code == ErrorCode.TOO_LONG
    assert "4001 tokens" in out[big.rid].error.message and "4000" in out[big.rid].error.message
    assert out[big.rid].stats["prefill_chunks"] == 0 and out[big.rid].events == 1
    assert out[ok.rid].text == "fine"
    assert engine.stats()["prefilled_tokens"] - before == 49  # only the small prompt was read
    assert engine.outcome().failed == {}  # a refusal is not a failure the other ranks must learn of


def test_a_request_whose_prefill_fails_fails_alone(engine):
    """Read together with others of its chunk size, the failing request is found (each is retried alone) and
    only it ends with error; outcome() names it for the other ranks."""
    tok = engine.tokenizer
    engine.outcome()
    reqs = [request(prompt(engine, 300, f"f{i}"), tok.encode(f"answer {i}")) for i in range(3)]
    bad = request(prompt(engine, 300, "x"), tok.encode("never"), fault="injected prefill failure")
    for r in [reqs[0], bad, *reqs[1:]]:
        engine.submit(r)
    out = drain(engine)
    assert out[bad.rid].finish == "error" and out[bad.rid].error.code == ErrorCode.FAILED
    assert "injected prefill failure" in out[bad.rid].error.message
    assert [out[r.rid].text for r in reqs] == [f"answer {i}" for i in range(3)]
    assert engine.outcome().failed.keys() == {bad.rid}


def test_a_failed_decode_step_fails_the_decoding_requests_and_the_engine_goes_on(tiny_model, monkeypatch):
    e = Engine(EngineArgs(model=str(tiny_model), max_tokens=64, trust_remote_code=True), hooks=FORCED)
    tok = e.tokenizer
    decoding = request(tok.encode("int a;"), list(range(100, 140)))
    e.submit(decoding)
    for _ in range(4):
        e.step()
    reading = request(prompt(e, 3000, "r"), tok.encode("after"))  # two chunks of 2048
    e.submit(reading)

    def broken():
        raise RuntimeError("decode blew up")

    monkeypatch.setattr(e._gen, "next", broken)  # this generator's next step fails
    events = e.step()  # reads the first chunk of `reading`, then the decode step fails
    assert [(ev.rid, ev.finish) for ev in events if ev.finish] == [(decoding.rid, "error")]
    assert "decode blew up" in next(ev for ev in events if ev.finish).error.message
    again = request(tok.encode("int b;"), tok.encode("still serving"))
    e.submit(again)
    out = drain(e)
    assert out[reading.rid].text == "after" and out[again.rid].text == "still serving"
    assert e.outcome().failed.keys() == {decoding.rid}
