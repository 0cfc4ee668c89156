"""The daemon while it loads its model: the layer-by-layer load through mlx-lm, and what clients see meanwhile."""

from __future__ import annotations

import asyncio
import itertools
import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.utils import load_model

from backend import launch, loading
from backend.dist import load_model as load_checkpoint
from tests.lsp import scripted
from tests.support.daemon import Wire, audit_fields, serving

PACE = ["--load-pace", "0.4"]  # 4 parts of the tests' checkpoint (3 layers + the rest): ~1.6 s of loading


def test_parts_are_read_one_after_the_other_and_give_mlx_lms_model(tiny_model):
    model, _ = load_model(tiny_model, lazy=True)
    seen: list[tuple[int, int]] = []
    total = loading.evaluate_in_parts(model, lambda done, all_: seen.append((done, all_)))
    layers = len(model.layers)
    assert len(seen) == layers + 2 and seen[0] == (0, total) and seen[-1] == (total, total)
    assert all(a[0] < b[0] for a, b in itertools.pairwise(seen)), seen  # every part reads bytes
    assert {t for _, t in seen} == {total}
    assert total == sum(v.nbytes for _, v in tree_flatten(model.parameters()))

    progress = loading.LoadProgress()
    paced, _ = load_checkpoint(str(tiny_model), trust_remote_code=True, progress=progress)
    whole, _ = load_model(tiny_model)  # mlx-lm's own one-shot load
    prompt = mx.array([[1, 5, 9, 42, 77]])
    assert mx.array_equal(paced(prompt), whole(prompt))
    assert progress.bytes_done == progress.bytes_total == total and progress.stage == "tokenizer"


def test_the_tiny_checkpoint_says_its_weights_are_random_and_a_trained_one_does_not(tiny_model):
    config = json.loads((tiny_model / "config.json").read_text())
    assert loading.ModelInfo.of(str(tiny_model), 1).random_weights  # so the welcome says so (k3lsp eval)
    assert not loading.says_random_weights({k: v for k, v in config.items() if k != "random_weights"})
    assert not loading.says_random_weights(config | {"random_weights": "yes"})


def test_progress_words_and_estimate():
    progress = loading.LoadProgress()
    assert progress.percent() == 0 and progress.eta() is None
    assert progress.describe() == "backend loading (0 %, weights)"
    progress.started -= 10  # 10 s for a quarter: about 30 s left
    progress.part_done(25, 100)
    assert progress.percent() == 25 and progress.eta() == pytest.approx(30, abs=0.5)
    assert progress.describe().startswith("backend loading (25 %, weights, about 30 s left")
    progress.part_done(100, 100)
    assert progress.percent() == 99  # read, but not warmed up: not ready yet
    progress.ready()
    assert progress.snapshot()["percent"] == 100 and "eta_seconds" not in progress.snapshot()
    progress.failed("out of memory")
    assert progress.describe() == "backend failed to load: out of memory"


async def test_status_says_loading_with_progress_then_ready_and_audits_wait(tiny_model):
    with serving(tiny_model, script=scripted.SCRIPT, args=PACE, until=launch.LISTENING) as daemon:
        async with Wire(daemon.endpoint, timeout=60) as wire:
            welcome = await wire.ask("hello", "h", client="test", version="0")
            assert welcome["kind"] == "welcome" and welcome["state"] == "loading", welcome
            assert welcome["model"] == "tiny" and welcome["fingerprint"] and welcome["loading"]["percent"] < 100
            await wire.send("audit", "early", **audit_fields("copy_msg", code=scripted.DEMO_C))
            seen = []
            for i in range(400):  # bounded: the load takes ~2 s
                status = (await wire.ask("status", f"s{i}"))["status"]
                seen.append(status)
                if status["state"] == "ready":
                    break
                await asyncio.sleep(0.05)
            msgs = await wire.finish("early")
    states = [s["state"] for s in seen]
    assert states[-1] == "ready" and set(states[:-1]) == {"loading"}, states
    during = [s["loading"] for s in seen[:-1]]
    assert any(0 < p["bytes_done"] < p["bytes_total"] for p in during), during  # partway through the weights
    done = [p["bytes_done"] for p in during]
    assert done == sorted(done) and all(0 <= p["percent"] <= 99 for p in during)
    assert "tokens_per_s" in seen[-1] and "loading" not in seen[-1]
    waits = [m for m in msgs if m["kind"] == "progress" and m["stage"] == "loading"]
    assert waits and waits[0]["detail"].startswith("backend loading ("), msgs
    assert msgs[-1]["kind"] == "done", msgs[-1]
    assert [m["finding"]["cwe"] for m in msgs if m["kind"] == "finding"] == [787]


async def test_an_audit_that_waits_longer_than_load_wait_gets_error_loading(tiny_model):
    with serving(tiny_model, args=[*PACE, "--load-wait", "0.5"], until=launch.LISTENING) as daemon:
        async with Wire(daemon.endpoint, timeout=60) as wire:
            msgs = await wire.request("audit", "a", **audit_fields("f"))
    assert msgs[-1]["kind"] == "error" and msgs[-1]["code"] == "loading", msgs[-1]
    assert "not ready within 0.5 s" in msgs[-1]["message"]
