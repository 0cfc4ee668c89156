"""The prompt-cache policy on the real engine and tiny checkpoint: entries typed by the segment they end,
eviction that keeps the system prompt and the pending tool continuations through a whole file, and a byte
budget that holds in the bytes the process really holds."""

from __future__ import annotations

import gc
import itertools
from dataclasses import dataclass, field

import mlx.core as mx

from backend import prompts
from backend.engine import Engine, EngineArgs
from tests.support.engine import drain
from tests.support.forcing import Forced
from tests.support.kimi import answer_tokens

CALL = prompts.ToolCall("read_lines", {"path": "lib/file.c", "start": 1, "end": 3}, 1)
EFFORT = "low"


def new_engine(model, **args) -> Engine:
    """An engine on the tiny checkpoint (whose tokenizer class is this repository's code)."""
    return Engine(EngineArgs(model=str(model), trust_remote_code=True, **args), hooks=Forced())


def unit_messages(tok, i: int) -> list[dict]:
    """Unit i of one file, with a context of its own (as most units of a real file have)."""
    code = f"int f{i}(char *p)\n{{\n\tchar b[{i + 8}];\n\treturn strcpy(b, p) != 0;\n}}"
    context = f"#include <string.h>\nstruct s{i} {{ int n{i}; }};"
    return prompts.audit_messages(
        path="lib/file.c", unit=f"f{i}", code=code, context=context, specials=prompts.special_strings(tok)
    )


@dataclass
class Round:
    unit: int
    number: int
    messages: list[dict]
    prompt: list[int] = field(default_factory=list)  # round 2: round 1's prompt + answer + the tool turn
    previous: int = 0  # round 2: tokens of round 1's prompt + answer, which the cache must give back
    segments: list[int] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def audit_file(engine: Engine, units: int, width: int = 8, tool_steps: int = 5) -> list[Round]:
    """Audit `units` units the way the agent does: at most `width` conversations open; every third unit calls
    read_lines in round 1, gets its result `tool_steps` engine steps later and goes on in round 2 (appended to
    round 1's prompt and generated tokens); a conversation is released when it ends."""
    tok = engine.tokenizer
    rids = itertools.count(1)
    todo, open_, later, done = list(range(units)), {}, [], []

    def submit(rnd: Round) -> None:
        if rnd.number == 1:
            r = prompts.render(tok, rnd.messages, prompts.AUDIT_TOOLS, EFFORT)
            rnd.prompt, rnd.segments = r.tokens, r.segments
        calls = [{"name": CALL.name, "arguments": CALL.arguments}] if rnd.number == 1 and rnd.unit % 3 == 0 else []
        answer = answer_tokens(tok, rnd.messages, prompts.AUDIT_TOOLS, EFFORT, "" if calls else "nothing", calls)
        rid = next(rids)
        open_[rid] = rnd
        engine.submit(engine.hooks.request(rid, rnd.prompt, rnd.segments, 256, 1.0, 0.95, rid, forced=answer[:-1]))

    for step in range(20_000):
        while todo and len(open_) + len(later) < width:
            submit(Round(todo[0], 1, unit_messages(tok, todo.pop(0))))
        for due, rnd in [x for x in later if x[0] <= step]:
            later.remove((due, rnd))
            submit(rnd)
        if not (todo or later or engine.busy()):
            return done
        for ev in engine.step():
            if ev.finish is None:
                continue
            rnd = open_.pop(ev.rid)
            assert ev.finish == "stop", ev
            rnd.stats = ev.stats
            done.append(rnd)
            if rnd.number == 1 and rnd.unit % 3 == 0:
                assistant = prompts.assistant_message("", [CALL])
                result = prompts.tool_message(CALL, "1| x", prompts.special_strings(tok))
                suffix = prompts.continuation(tok, rnd.messages, assistant, [result], prompts.AUDIT_TOOLS, EFFORT)
                follow = Round(
                    rnd.unit,
                    2,
                    [*rnd.messages, assistant, result],
                    [*rnd.prompt, *ev.tokens, *suffix],
                    ev.stats["prompt_tokens"] + ev.stats["generated_tokens"],
                    rnd.segments,
                )
                later.append((step + tool_steps, follow))
            else:
                engine.release(ev.rid)
    raise AssertionError("the file's audit did not end")


def test_entries_are_typed_by_the_segment_they_end(tiny_model):
    e = new_engine(tiny_model, max_tokens=64)
    messages = unit_messages(e.tokenizer, 1)
    r = prompts.render(e.tokenizer, messages, prompts.AUDIT_TOOLS, EFFORT)
    e.submit(e.hooks.request(1, r.tokens, r.segments, 64, 1.0, 0.95, 1, forced=e.tokenizer.encode("ok")))
    drain(e)
    kinds = {k: v["n_sequences"] for k, v in e.stats()["prompt_cache"].items()}
    assert kinds == {"system": 1, "context": 1, "continuation": 1}
    # The second unit of another file: its system prefix is found, its context stored as a context.
    other = prompts.render(e.tokenizer, unit_messages(e.tokenizer, 2), prompts.AUDIT_TOOLS, EFFORT)
    e.submit(e.hooks.request(2, other.tokens, other.segments, 64, 1.0, 0.95, 2, forced=e.tokenizer.encode("ok")))
    out = drain(e)[2]
    assert out.stats["cached_tokens"] == other.segments[0]
    kinds = {k: v["n_sequences"] for k, v in e.stats()["prompt_cache"].items()}
    assert kinds == {"system": 1, "context": 2, "continuation": 2}
    e.release(1)  # a conversation that is over frees its continuation
    assert e.stats()["prompt_cache"]["continuation"]["n_sequences"] == 1


def test_eviction_keeps_the_system_entry_and_the_tool_continuations_through_a_30_unit_file(tiny_model):
    e = new_engine(tiny_model, max_tokens=256, max_concurrency=8, prompt_cache_size=16)
    rounds = audit_file(e, 30)
    assert len(rounds) == 40  # 30 first rounds, 10 continuations
    later_firsts = [r for r in rounds if r.number == 1 and r.unit >= 8]  # the first 8 start before anything is cached
    assert all(r.stats["cached_tokens"] >= r.segments[0] for r in later_firsts), [
        (r.unit, r.stats["cached_tokens"], r.segments[0]) for r in later_firsts
    ]
    continuations = [r for r in rounds if r.number == 2]
    assert len(continuations) == 10
    assert all(r.stats["cached_tokens"] == r.previous for r in continuations), [
        (r.unit, r.stats["cached_tokens"], r.previous) for r in continuations
    ]
    cache = e.stats()["prompt_cache"]
    assert cache["system"]["n_sequences"] == 1 and cache["continuation"]["n_sequences"] == 0  # all released
    assert e.stats()["prompt_cache_entries"] <= 16


def held_bytes() -> int:
    gc.collect()
    mx.synchronize()
    return mx.get_active_memory()


def test_the_byte_budget_holds_in_held_bytes(tiny_model):
    """What the cache counts is what the process holds: stored states are copies, never slices that keep a whole
    batch's buffer alive. Measured as active mlx memory over an idle engine with an empty cache."""
    budget = 3_000_000  # ~15 entries of the tiny model: the whole file does not fit
    e = new_engine(tiny_model, max_tokens=256, prompt_cache_bytes=budget, prompt_cache_size=1000)
    audit_file(e, 4)  # compile every path first
    e.clear_prompt_cache()
    before = held_bytes()
    audit_file(e, 30)
    counted, held = e.stats()["prompt_cache_bytes"], held_bytes() - before
    assert e.stats()["prompt_cache"]["system"]["n_sequences"] == 1
    assert counted <= budget
    assert held <= budget + 100_000, (counted, held)  # 100 kB: allocations of the engine itself
    assert held >= 0.9 * counted  # the measurement sees the entries


def units_of_one_file(tok, count: int) -> list[prompts.Rendered]:
    """The first rounds of ``count`` units of one file, which share its context."""
    context = "#include <string.h>\nstruct shared { int n; };\nstatic int helper(int x);"
    rendered = []
    for i in range(count):
        code = f"int g{i}(char *p)\n{{\n\treturn helper({i}) + strlen(p);\n}}"
        messages = prompts.audit_messages(
            path="lib/file.c", unit=f"g{i}", code=code, context=context, specials=prompts.special_strings(tok)
        )
        rendered.append(prompts.render(tok, messages, prompts.AUDIT_TOOLS, EFFORT))
    return rendered


def test_units_of_a_file_sent_together_read_the_shared_prefix_once(tiny_model):
    """Four units of one file arrive in the same step: the first reads system + file context, the others wait
    the step or two it takes and then read only their own tails."""
    e = new_engine(tiny_model, max_tokens=64)
    rendered = units_of_one_file(e.tokenizer, 4)
    for rid, r in enumerate(rendered, 1):
        e.submit(e.hooks.request(rid, r.tokens, r.segments, 64, 1.0, 0.95, rid, forced=e.tokenizer.encode("ok")))
    out = drain(e)
    shared = rendered[0].segments[1]
    assert all(r.segments[1] == shared for r in rendered)
    assert [out[rid].stats["cached_tokens"] for rid in (1, 2, 3, 4)] == [0, shared, shared, shared]
    assert e.stats()["prefilled_tokens"] == shared + sum(len(r.tokens) - 1 - shared for r in rendered)


def test_a_file_context_is_cached_for_its_owner_alone_the_system_prompt_for_everyone(tiny_model):
    """Units of one file from two people in the same step: the second person's unit waits only for the system
    prompt (shared), then reads the whole file context itself; the first person's next unit gets the context.
    What is cached for whom must not tell one person what another audited
    (tests/security/test_prompt_cache_oracle.py)."""
    e = new_engine(tiny_model, max_tokens=64)
    rendered = units_of_one_file(e.tokenizer, 3)
    owners = {1: "alice", 2: "bob", 3: "alice"}
    for rid, r in enumerate(rendered, 1):
        e.submit(
            e.hooks.request(
                rid, r.tokens, r.segments, 64, 1.0, 0.95, rid, forced=e.tokenizer.encode("ok"), owner=owners[rid]
            )
        )
    out = drain(e)
    system, shared = rendered[0].segments
    assert [out[rid].stats["cached_tokens"] for rid in (1, 2, 3)] == [0, system, shared]
    kinds = {k: v["n_sequences"] for k, v in e.stats()["prompt_cache"].items()}
    assert kinds["system"] == 1 and kinds["context"] == 2  # one context entry each
    for rid in (1, 2, 3):  # a continuation is released by its owner's conversation only
        e.release(rid)
    assert e.stats()["prompt_cache"]["continuation"]["n_sequences"] == 0
