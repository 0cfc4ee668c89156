"""`k3-backend serve` as a real process on the tiny checkpoint, over tcp://127.0.0.1 with a raw DEALER."""

import asyncio
import signal
import subprocess
import sys

import msgpack
import pytest

from k3lsp.wire import protocol
from tests.support.daemon import Wire, audit_fields, serving
from tests.support.kimi import turn

READ = ("read_lines", {"path": "src/f.c", "start": 1, "end": 2})
# Long, varied text (no short period for the loop guard): a generation that takes many steps.
LONG = " ".join(f"v{i} = a[{i}] + {i * 7 % 13};" for i in range(400))
SHORT = " ".join(f"x{i} = b[{i}];" for i in range(6))
MAX_OPEN = 9

SCRIPT = [
    {"unit": "holder", "turns": [turn(READ)]},  # waits on the client's tool_result
    {"unit": "long", "turns": [LONG]},
    {"unit": "short", "turns": [turn(content=SHORT)]},
    {"unit": "looper", "turns": [{"repeat": "x = x + 1;\n", "tokens": 400}]},
]


@pytest.fixture(scope="module")
def daemon(tiny_model):
    args = [
        "--max-tokens",
        "3000",
        "--max-open-per-client",
        str(MAX_OPEN),
        "--max-prompt-tokens",
        "20000",
        "--prompt-cache-size",
        "12",
        "--prompt-cache-bytes",
        "50000000",
    ]
    with serving(tiny_model, script=SCRIPT, args=args) as d:
        yield d


async def poll_status(wire: Wire, until, tries: int = 600) -> dict:
    """Status until ``until(status)`` holds (bounded: tries x 50 ms)."""
    for i in range(tries):
        status = (await wire.ask("status", f"st{i}"))["status"]
        if until(status):
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"status never satisfied the condition: {status}")


async def test_hello_and_ping(daemon, tiny_model):
    async with Wire(daemon.endpoint) as wire:
        welcome = await wire.ask("hello", "h", client="test", version="0")
        assert welcome["kind"] == "welcome" and welcome["model"] == tiny_model.name
        assert welcome["experts"] == 8 and welcome["ranks"] == 1
        assert welcome["limits"]["max_open_requests"] == MAX_OPEN
        assert welcome["limits"]["max_prompt_tokens"] == 20000
        assert (await wire.ask("ping", "p"))["kind"] == "pong"


async def test_prompt_cache_flags_reach_the_engine(daemon):
    async with Wire(daemon.endpoint) as wire:
        await wire.request("audit", "pc", **audit_fields("unscripted", max_tokens=4))
        engine = (await wire.ask("status", "s"))["status"]["engine"]
    assert engine["prompt_cache_limit_bytes"] == 50_000_000 and 0 < engine["prompt_cache_entries"] <= 12
    assert engine["prompt_cache"]["system"]["n_sequences"] == 1


async def test_an_audit_counts_what_its_prompt_cost_to_prefill(daemon):
    """The figure a workspace audit's estimate times whole prompts with (k3lsp.lsp.workscope.measured_prompt)."""
    async with Wire(daemon.endpoint) as wire:
        before = (await wire.ask("status", "s0"))["status"]
        done = (await wire.request("audit", "pf", **audit_fields("prefill_cost", max_tokens=4)))[-1]
        after = (await wire.ask("status", "s1"))["status"]
    prefilled = done["stats"]["prompt_tokens"] - done["stats"]["cached_tokens"]
    assert done["kind"] == "done" and prefilled > 0
    assert after["audits_prefilled"] == before["audits_prefilled"] + 1
    assert after["audit_prefilled_tokens"] == before["audit_prefilled_tokens"] + prefilled


@pytest.mark.parametrize("flag", ["--prompt-cache-bytes", "--max-prompt-tokens", "--prompt-cache-size"])
def test_serve_refuses_negative_limits_before_loading(flag, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", "--model", str(tmp_path / "absent"), flag, "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and flag in done.stderr and "cannot load" not in done.stderr


async def test_request_streams_to_one_terminal_with_stats(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "r", **audit_fields("unscripted", max_tokens=12))
        terminals = [m for m in msgs if m["kind"] in protocol.TERMINAL_KINDS]
        assert terminals == [msgs[-1]] and msgs[-1]["kind"] == "done"
        stats = msgs[-1]["stats"]
        assert stats["prompt_tokens"] > 100 and 1 <= stats["generated_tokens"] <= 12
        assert stats["finish_reason"] in ("stop", "length", "loop") and stats["seconds"] > 0
        # nothing more arrives for that request
        await wire.send("ping", "after")
        assert (await wire.recv(10))["id"] == "after"


async def test_concurrent_requests_are_batched(daemon):
    async with Wire(daemon.endpoint) as wire:
        for i in range(8):
            await wire.send("audit", f"b{i}", **audit_fields("short", code=f"int g{i}(void)\n{{\n\treturn {i};\n}}\n"))
        results = [await wire.finish(f"b{i}") for i in range(8)]
        status = (await wire.ask("status", "s"))["status"]
    assert all(r[-1]["kind"] == "done" and r[-1]["stats"]["finish_reason"] == "stop" for r in results)
    assert max(r[-1]["stats"]["batch_size_peak"] for r in results) > 1
    assert status["batch_size_peak"] > 1


async def test_cancel_mid_generation_frees_the_slot(daemon):
    async with Wire(daemon.endpoint) as wire:
        await wire.send("audit", "c", **audit_fields("long"))
        before = await poll_status(wire, lambda s: s["active"] >= 1)
        started = before["engine"]["tokens_generated"]
        await poll_status(wire, lambda s: s["engine"]["tokens_generated"] > started + 5)
        # the loop answers pings while the engine thread is busy generating
        assert (await wire.ask("ping", "p"))["kind"] == "pong"
        cancelled_before = before["engine"]["finish"]["cancelled"]
        await wire.send("cancel", "c")
        msgs = await wire.finish("c")
        assert [m["kind"] for m in msgs if m["kind"] in protocol.TERMINAL_KINDS] == ["cancelled"]
        after = await poll_status(wire, lambda s: s["active"] == 0 and s["open_requests"] == 0)
        assert after["engine"]["finish"]["cancelled"] == cancelled_before + 1
        assert after["engine"]["tokens_generated"] < started + len(LONG.split()) * 3  # it did not run to the end
        # a cancel for a finished request is ignored, and the daemon goes on serving
        await wire.send("cancel", "c")
        msgs = await wire.request("audit", "c2", **audit_fields("short"))
        assert msgs[-1]["kind"] == "done"


MALFORMED = [
    b"",
    b"\xc1",
    b"not msgpack at all",
    msgpack.packb([1, 2, 3]),
    msgpack.packb({"v": 1, "id": "m1", "kind": "audit"}),  # missing fields
    msgpack.packb({"v": 1, "id": "m2", "kind": "frobnicate"}),
    msgpack.packb({"v": 1, "id": "m3", "kind": "audit", "path": 3, "unit": "u", "code": "", "context": ""}),
    msgpack.packb(
        {
            "v": 1,
            "id": "m4",
            "kind": "explain",
            "path": "a",
            "unit": "u",
            "code": "",
            "context": "",
            "finding": {"cwe": 1, "severity": "high", "title": "t", "message": "", "start_line": 5, "end_line": 2},
        }
    ),
    msgpack.packb({1: 2}),
    msgpack.packb({"v": 1, "id": "x" * 500, "kind": "ping"}),
    msgpack.packb({"v": 1, "id": "m5", "kind": "ping"}) + b"\x00",
]


async def test_malformed_frames_get_errors_and_the_daemon_keeps_serving(daemon):
    async with Wire(daemon.endpoint) as wire:
        for frame in MALFORMED:
            await wire.send_raw(frame)
            reply = await wire.recv(30)
            assert reply["kind"] == "error" and reply["code"] == "bad_request", (frame, reply)
        await wire.send_raw(msgpack.packb({"v": 1, "id": "m6", "kind": "audit"}))
        assert (await wire.recv(30))["id"] == "m6"  # the id is echoed when it could be read
        await wire.send_raw(msgpack.packb({"v": 2, "id": "m7", "kind": "ping"}))
        reply = await wire.recv(30)
        assert reply["id"] == "m7" and reply["code"] == "version"
        await wire.send_raw(b"a", b"two frames")
        assert (await wire.recv(30))["code"] == "bad_request"
        assert (await wire.ask("ping", "alive"))["kind"] == "pong"
        msgs = await wire.request("audit", "ok", **audit_fields("short"))
        assert msgs[-1]["kind"] == "done"


async def test_loop_guard_fires(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "l", **audit_fields("looper"))
        status = (await wire.ask("status", "s"))["status"]
    stats = msgs[-1]["stats"]
    assert msgs[-1]["kind"] == "done" and stats["finish_reason"] == "loop"
    assert stats["generated_tokens"] < 400
    assert status["loop_rate"] > 0 and status["engine"]["loops"] >= 1


async def test_second_request_with_same_prefix_uses_the_cache(daemon):
    context = "#include <linux/slab.h>\nstruct cache_probe { int len; char buf[16]; };"
    async with Wire(daemon.endpoint) as wire:
        first = await wire.request("audit", "p1", **audit_fields("probe_one", context=context, max_tokens=4))
        second = await wire.request("audit", "p2", **audit_fields("probe_two", context=context, max_tokens=4))
    a, b = first[-1]["stats"], second[-1]["stats"]
    assert b["cached_tokens"] > a["cached_tokens"]  # the file context is now cached too
    assert 0 < b["cached_tokens"] < b["prompt_tokens"]


async def test_duplicate_id_and_per_client_limit(daemon):
    async with Wire(daemon.endpoint) as wire:
        for i in range(MAX_OPEN):
            await wire.send("audit", f"h{i}", **audit_fields("holder"))
            await wire.until(f"h{i}", "tool_request")
        busy = await wire.request("audit", "extra", **audit_fields("short"))
        assert busy[-1]["kind"] == "error" and busy[-1]["code"] == "busy"
        async with Wire(daemon.endpoint) as other:  # the limit is per client (this user), not per connection
            refused = await other.request("audit", "o", **audit_fields("short"))
            assert refused[-1]["kind"] == "error" and refused[-1]["code"] == "busy"
        # a reused id ends the open request with the one terminal message "duplicate"
        dup = await wire.request("audit", "h0", **audit_fields("short"))
        assert dup == [dup[-1]] and dup[-1]["kind"] == "error" and dup[-1]["code"] == "duplicate"
        for i in range(MAX_OPEN):
            await wire.send("cancel", f"h{i}")
        ends = [(await wire.finish(f"h{i}"))[-1]["kind"] for i in range(1, MAX_OPEN)]
        assert ends == ["cancelled"] * (MAX_OPEN - 1)
        await wire.send("ping", "barrier")  # anything more for h0 would arrive before the pong
        assert (await wire.recv(30))["id"] == "barrier"


async def test_a_malformed_message_for_an_open_request_ends_it_once(daemon):
    async with Wire(daemon.endpoint) as wire:
        await wire.send("audit", "t1", **audit_fields("holder"))
        request = await wire.until("t1", "tool_request")
        await wire.send_raw(msgpack.packb({"v": 1, "id": "t1", "kind": "tool_result", "call": request["call"]}))
        end = await wire.next_for("t1")
        assert end["kind"] == "error" and end["code"] == "bad_request"
        await wire.send("ping", "barrier")
        assert (await wire.recv(30))["id"] == "barrier"  # no second terminal message for t1
        # a malformed cancel or tool_result for no open request gets no reply under that id
        await wire.send_raw(msgpack.packb({"v": 2, "id": "t1", "kind": "cancel"}))
        await wire.send_raw(msgpack.packb({"v": 1, "id": "t9", "kind": "tool_result"}))
        replies = [await wire.recv(30) for _ in range(2)]
        assert [(r["kind"], r["id"], r["code"]) for r in replies] == [
            ("error", "-", "version"),
            ("error", "-", "bad_request"),
        ]


async def test_vanished_client_requests_are_cancelled(daemon):
    async with Wire(daemon.endpoint) as watcher:
        gone = Wire(daemon.endpoint)
        await gone.send("audit", "v", **audit_fields("holder"))
        await gone.until("v", "tool_request")
        assert (await watcher.ask("status", "s0"))["status"]["open_requests"] == 1
        gone.close()
        status = await poll_status(watcher, lambda s: s["open_requests"] == 0)
        assert status["vanished"] >= 1


async def test_deadline_then_sigterm_ends_open_requests_with_shutdown(tiny_model):
    with serving(tiny_model, script=SCRIPT, args=["--deadline", "4"]) as d:
        async with Wire(d.endpoint) as wire:
            # the client never answers the tool call: the request ends on the deadline, as `done`
            msgs = await wire.request("audit", "d", **audit_fields("holder"))
            assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["finish_reason"] == "deadline"
            await wire.send("audit", "s", **audit_fields("long"))
            assert (await wire.next_for("s"))["kind"] == "progress"  # the request is open
            d.proc.send_signal(signal.SIGTERM)
            end = await wire.next_for("s", timeout=60)
            assert end["kind"] == "error" and end["code"] == "shutdown"
        code = d.proc.wait(60)  # it exits by itself after SIGTERM
        assert code == 0, d.log_text()[-3000:]


async def test_cancel_right_after_the_request_still_ends_it_once(daemon):
    async with Wire(daemon.endpoint) as wire:
        for i in range(5):
            await wire.send("audit", f"q{i}", **audit_fields("holder"))
            await wire.send("cancel", f"q{i}")
        for i in range(5):
            ends = [m for m in await wire.finish(f"q{i}") if m["kind"] in protocol.TERMINAL_KINDS]
            assert [m["kind"] for m in ends] == ["cancelled"]
        await wire.send("ping", "after")
        assert (await wire.recv(10))["id"] == "after"  # nothing else was sent for those requests
        assert (await wire.ask("status", "s"))["status"]["open_requests"] == 0
