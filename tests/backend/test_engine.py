"""The engine on the real tiny kimi_k3: batching, forced answers, cancel, loop guard, prompt-cache reuse.

Answers are scripted through the engine's hooks (`FORCED`, tests/support/forcing.py), so the real BatchGenerator,
sampler (temp 1.0, top-p 0.95), detokenizer, stop token and tool parser all run while the output stays known. The
tests that render prompts run on both dialects of the checkpoint (`checkpoint`); the scheduling ones on the
release-shaped one.
"""

import itertools

import pytest

from backend import channels, prompts
from backend.engine import PHASES, Engine, EngineArgs, GenRequest
from backend.prefill import chunk_for
from tests.conftest import TINY_LAYERS
from tests.support.engine import drain
from tests.support.forcing import Forced
from tests.support.kimi import answer_tokens

FINDING = {
    "cwe": 120,
    "severity": "high",
    "title": "strcpy into a fixed buffer",
    "message": "no bound",
    "start_line": 3,
    "end_line": 3,
    "trace": [{"line": 1, "note": "p from caller"}, {"line": 3, "note": "sink"}],
}
rids = itertools.count(1)
FORCED = Forced()  # every engine of this module answers by it


@pytest.fixture(scope="module")
def engine(checkpoint):
    e = Engine(EngineArgs(model=str(checkpoint.path), max_tokens=512, trust_remote_code=True), hooks=FORCED)
    e.warmup()
    assert e.stats()["generations"] == 0 and not e.busy()  # warm-up leaves no trace
    return e


def new_engine(model, **args) -> Engine:
    """An engine of its own on the tiny checkpoint (whose tokenizer class is this repository's code)."""
    return Engine(EngineArgs(model=str(model), trust_remote_code=True, **args), hooks=FORCED)


def unit(tok, name: str, context: str = "#include <string.h>", path: str = "lib/unit.c") -> list[dict]:
    code = f"int {name}(char *p)\n{{\n\tchar b[8];\n\treturn strcpy(b, p) != 0;\n}}"
    return prompts.audit_messages(
        path=path, unit=name, code=code, context=context, specials=prompts.special_strings(tok)
    )


def request(tokens, segments=(), forced=None, max_tokens=256, seed=0, priority=0, temp=1.0) -> GenRequest:
    return FORCED.request(
        next(rids),
        list(tokens) if tokens is not None else None,
        list(segments),
        max_tokens,
        temp,
        0.95,
        seed,
        priority,
        forced=forced,
    )


def test_forced_report_finding_round_trips(engine):
    tok = engine.tokenizer
    messages = unit(tok, "f1")
    r = prompts.render(tok, messages, prompts.AUDIT_TOOLS, "low")
    answer = answer_tokens(
        tok, messages, prompts.AUDIT_TOOLS, "low", "", [{"name": "report_finding", "arguments": FINDING}]
    )
    req = request(r.tokens, r.segments, forced=answer[:-1], max_tokens=len(answer))  # room for the answer alone
    engine.submit(req)
    out = drain(engine)[req.rid]
    assert out.finish == "stop"
    assert out.stats["prompt_tokens"] == len(r.tokens) and out.stats["generated_tokens"] == len(answer)
    assert out.tokens == answer  # every generated id, the stop token last
    turn = prompts.parse_turn(channels.Markers.of(tok), out.text, channels.initial_state(tok, r.tokens))
    assert turn.errors == [] and turn.content == ""
    assert [(c.name, c.arguments) for c in turn.calls] == [("report_finding", FINDING)]


def test_two_requests_decode_in_one_step(engine):
    tok = engine.tokenizer
    a, b = tok.encode("static int a;"), tok.encode("static int bb;")
    script_a, script_b = tok.encode("first answer here"), tok.encode("the second one, a bit longer")
    ra, rb = request(a, forced=script_a), request(b, forced=script_b)
    together = []
    engine.submit(ra)
    engine.submit(rb)
    out = drain(engine, on_step=lambda n, evs: together.append({e.rid for e in evs} == {ra.rid, rb.rid}))
    assert any(together)
    assert out[ra.rid].text == "first answer here" and out[rb.rid].text == "the second one, a bit longer"
    assert out[ra.rid].stats["batch_size_peak"] == 2 and out[rb.rid].stats["batch_size_peak"] == 2
    assert engine.stats()["batch_size_peak"] >= 2


def test_every_phase_of_a_step_is_timed(engine):
    """step_seconds (status: the step profile of docs/engine.md) names every phase and charges the model's work
    to prefill and decode; one rank keeps no state digest (only ranks that compare their states need one)."""
    before = dict(engine.stats()["step_seconds"])
    req = request(engine.tokenizer.encode("int timed(void);" * 20), forced=range(10, 60))
    engine.submit(req)
    assert drain(engine)[req.rid].stats["generated_tokens"] == 51
    spent = {phase: seconds - before[phase] for phase, seconds in engine.stats()["step_seconds"].items()}
    assert set(spent) == set(PHASES) and spent["sync"] == 0
    assert spent["decode"] > 0 and spent["prefill"] > 0 and spent["tokens"] > 0
    assert engine.outcome().digest == ""


def test_new_request_joins_a_running_batch(engine):
    tok = engine.tokenizer
    long = request(tok.encode("void long_one(void);"), forced=range(10, 110))
    late = request(tok.encode("void late(void);"), forced=tok.encode("short"))
    engine.submit(long)

    def join(n, events):
        if n == 5:
            engine.submit(late)

    out = drain(engine, on_step=join)
    assert out[long.rid].stats["generated_tokens"] == 101 and out[late.rid].text == "short"
    assert out[late.rid].stats["batch_size_peak"] == 2


def test_cancel_mid_generation_frees_the_slot(engine):
    tok = engine.tokenizer
    victim = request(tok.encode("void victim(void);"), forced=range(10, 300), max_tokens=400)
    other = request(tok.encode("void other(void);"), forced=tok.encode("still here"))
    engine.submit(victim)
    engine.submit(other)

    def cancel_after_text(n, events):
        if any(e.rid == victim.rid and e.text for e in events):
            engine.cancel(victim.rid)

    out = drain(engine, on_step=cancel_after_text)
    assert out[victim.rid].finish == "cancelled"
    assert 0 < out[victim.rid].stats["generated_tokens"] < 20
    assert out[other.rid].finish == "stop" and out[other.rid].text == "still here"
    assert engine.stats()["active"] == 0 and not engine.busy()


def test_cancel_of_a_queued_request(tiny_model):
    e = new_engine(tiny_model, max_concurrency=1)
    tok = e.tokenizer
    first, queued = request(tok.encode("a"), forced=tok.encode("x y z")), request(tok.encode("b"))
    e.submit(first)
    e.submit(queued)
    e.step()
    assert e.stats()["queued"] == 1
    e.cancel(queued.rid)
    e.cancel(12345)  # unknown ids are ignored
    out = drain(e)
    assert out[queued.rid].finish == "cancelled" and out[queued.rid].stats["generated_tokens"] == 0
    assert out[first.rid].text == "x y z"


def test_loop_guard_stops_a_repeating_generation(engine):
    tok = engine.tokenizer
    loops_before = engine.stats()["loops"]
    req = request(tok.encode("while (1)"), forced=tok.encode(" again and") * 100, max_tokens=500)
    engine.submit(req)
    out = drain(engine)[req.rid]
    assert out.finish == "loop"
    assert out.stats["generated_tokens"] == engine.args.loop_span  # fires on the first fully periodic window
    assert engine.stats()["loops"] == loops_before + 1 and engine.stats()["loop_rate"] > 0


def test_max_tokens_gives_length(engine):
    req = request(engine.tokenizer.encode("for (;;)"), forced=range(10, 60), max_tokens=7)
    engine.submit(req)
    out = drain(engine)[req.rid]
    assert out.finish == "length" and out.stats["generated_tokens"] == 7


def test_second_unit_of_a_file_reuses_the_system_and_context_cache(engine):
    tok = engine.tokenizer
    context = "#include <linux/slab.h>\nstruct cache_test { int n; };"
    r1 = prompts.render(tok, unit(tok, "c1", context), prompts.AUDIT_TOOLS, "low")
    r2 = prompts.render(tok, unit(tok, "c2", context), prompts.AUDIT_TOOLS, "low")
    first = request(r1.tokens, r1.segments, forced=tok.encode("ok"))
    engine.submit(first)
    assert drain(engine)[first.rid].stats["cached_tokens"] < r1.segments[1]  # new context: not cached yet
    second = request(r2.tokens, r2.segments, forced=tok.encode("ok"))
    engine.submit(second)
    out = drain(engine)[second.rid]
    assert out.stats["cached_tokens"] == r2.segments[1] > 0
    assert out.text == "ok"


def test_continuation_after_a_tool_call_only_prefills_the_new_tokens(engine):
    tok = engine.tokenizer
    messages = unit(tok, "cont", "#define N 8")
    r1 = prompts.render(tok, messages, prompts.AUDIT_TOOLS, "low")
    call = {"name": "read_lines", "arguments": {"path": "lib/cont.c", "start": 1, "end": 4}}
    answer = answer_tokens(tok, messages, prompts.AUDIT_TOOLS, "low", "", [call], "Read it.")
    first = request(r1.tokens, r1.segments, forced=answer[:-1])
    engine.submit(first)
    out1 = drain(engine)[first.rid]
    assert out1.finish == "stop"
    turn = prompts.parse_turn(channels.Markers.of(tok), out1.text, channels.initial_state(tok, r1.tokens))
    result = prompts.tool_message(turn.calls[0], "1 int cont(char *p)", prompts.special_strings(tok))
    assistant = prompts.assistant_message(turn.content, turn.calls, turn.reasoning)
    suffix = prompts.continuation(tok, messages, assistant, [result], prompts.AUDIT_TOOLS, "low")
    prompt = [*r1.tokens, *out1.tokens, *suffix]  # appended: prompt + generation (stop token included) + tool turn
    second = request(prompt, r1.segments, forced=tok.encode("done"))
    engine.submit(second)
    out2 = drain(engine)[second.rid]
    assert out2.stats["cached_tokens"] == len(r1.tokens) + len(answer)
    # Only the tool-result turn and the generation prompt are prefilled.
    assert tok.decode(prompt[out2.stats["cached_tokens"] :]).startswith('<|open|>message role="tool"')


def test_bad_requests_fail_alone(engine):
    tok = engine.tokenizer
    good = request(tok.encode("int ok;"), forced=tok.encode("fine"))
    bad = [
        request([]),
        request([1, 10**6]),
        request([5], max_tokens=0),
        request([5], forced=[-1]),
        request([5, 6], segments=[9]),
        request([5], temp=-1.0),
        request([5], temp=float("nan")),
        request([5], seed="x"),
        request([5], priority=None),
        request(None),
        request([5], temp="hot"),
    ]
    for r in [*bad, good]:
        engine.submit(r)
    out = drain(engine)
    assert out[good.rid].finish == "stop" and out[good.rid].text == "fine"
    for r in bad:
        assert out[r.rid].finish == "error" and out[r.rid].error, r


def test_duplicate_request_id_is_refused(engine):
    tok = engine.tokenizer
    r = request(tok.encode("x"), forced=tok.encode("y"))
    engine.submit(r)
    with pytest.raises(ValueError):
        engine.submit(r)
    assert drain(engine)[r.rid].text == "y"


def test_interactive_requests_are_admitted_first(tiny_model):
    e = new_engine(tiny_model, max_concurrency=1)
    tok = e.tokenizer
    bg1, bg2 = (request(tok.encode(f"bg{i}"), forced=tok.encode("b"), priority=1) for i in (1, 2))
    fg = request(tok.encode("fg"), forced=tok.encode("f"), priority=0)
    order = []
    for r in (bg1, bg2, fg):
        e.submit(r)
    drain(e, on_step=lambda n, evs: order.extend(ev.rid for ev in evs if ev.finish))
    assert order == [fg.rid, bg1.rid, bg2.rid]


def test_background_work_leaves_a_slot_for_an_edit(tiny_model):
    e = new_engine(tiny_model, max_concurrency=3, interactive_reserve=1)
    tok = e.tokenizer
    background = [request(tok.encode(f"bg{i}"), forced=range(10, 40), priority=1) for i in range(4)]
    for r in background:
        e.submit(r)
    e.step()
    assert (e.stats()["active"], e.stats()["queued"]) == (2, 2)
    edit = request(tok.encode("edit"), forced=tok.encode("now"), priority=0)
    e.submit(edit)
    e.step()
    assert (e.stats()["active"], e.stats()["queued"]) == (3, 2)
    out = drain(e)
    assert out[edit.rid].text == "now" and out[edit.rid].stats["batch_size_peak"] == 3
    assert all(out[r.rid].finish == "stop" for r in background)


def test_same_seed_same_sample(engine):
    tok = engine.tokenizer
    prompt = tok.encode("int seeded(void)")
    texts = []
    for seed in (-7, -7, 8):
        r = request(prompt, seed=seed, max_tokens=24)
        engine.submit(r)
        texts.append(drain(engine)[r.rid].text)
    assert texts[0] == texts[1] and texts[0] != texts[2]


def test_sample_does_not_depend_on_batch_neighbours(engine):
    tok = engine.tokenizer
    prompt = tok.encode("int neighbours(void)")
    alone = request(prompt, seed=11, max_tokens=24)
    engine.submit(alone)
    expected = drain(engine)[alone.rid].text
    batched = request(prompt, seed=11, max_tokens=24)
    engine.submit(request(tok.encode("noise"), seed=3, max_tokens=24))
    engine.submit(batched)
    engine.submit(request(tok.encode("more noise here"), seed=4, max_tokens=24))
    assert drain(engine)[batched.rid].text == expected


def test_prefill_step_shrinks_for_long_prompts():
    assert chunk_for(2048, 100) == 2048
    assert chunk_for(2048, 8192) == 2048
    assert chunk_for(2048, 16384) == 1024
    assert chunk_for(2048, 32768) == 512
    assert chunk_for(2048, 10**7) == 256
    assert chunk_for(512, 12000) == 256
    assert chunk_for(128, 10**6) == 128  # never above the configured step
    steps = [chunk_for(2048, n) for n in range(1, 200_000, 997)]
    assert steps == sorted(steps, reverse=True) and all(
        s * n <= 2048 * 8192 or s == 256 for s, n in zip(steps, range(1, 200_000, 997), strict=True)
    )


def test_pruned_model_serves(pruned_model):
    e = new_engine(pruned_model)
    assert e.experts == 5 and e.layers == TINY_LAYERS and e.ranks == 1 and e.model_id == pruned_model.name
    tok = e.tokenizer
    r = request(tok.encode("int pruned;"), forced=tok.encode("pruned answer"))
    e.submit(r)
    assert drain(e)[r.rid].text == "pruned answer"


def test_a_failing_prompt_cache_store_still_finishes_every_request(tiny_model, monkeypatch):
    """Storing a cache happens after a request left the batch: if it raises, the request must still end."""
    e = new_engine(tiny_model, max_tokens=64)

    def broken(*_args, **_kwargs):
        raise MemoryError("no room for the cache")

    monkeypatch.setattr(e._cache, "insert_cache", broken)
    r = prompts.render(e.tokenizer, unit(e.tokenizer, "fc"), prompts.AUDIT_TOOLS, "low")
    req = request(r.tokens, r.segments, forced=e.tokenizer.encode("fine"))
    e.submit(req)
    out = drain(e)[req.rid]
    assert out.finish == "stop" and out.text == "fine"
    assert not e.busy()
