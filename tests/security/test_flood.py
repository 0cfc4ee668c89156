"""10,000 malformed or oversized frames from an authenticated client leave the daemon serving, memory sane.

An unauthenticated sender never gets past the CURVE handshake, so the worst case is a client whose key
is allowed: its garbage must cost the daemon an ``error`` reply per frame and nothing else.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgpack

from k3lsp.wire import protocol
from tests.support.daemon import audit_fields

TOTAL = 10_000
BURST = 500
OVERSIZED = 4  # frames over MAXMSGSIZE: libzmq drops the connection, the DEALER reconnects


def malformed(rng: random.Random, i: int) -> list[bytes]:
    valid = protocol.encode(protocol.make("audit", f"f{i}", **audit_fields("flood")))
    shapes = [
        lambda: rng.randbytes(rng.randrange(0, 64)),  # noise
        lambda: valid[: rng.randrange(1, len(valid))],  # truncated
        lambda: bytes(b ^ 0xFF if k == 0 or rng.random() < 0.05 else b for k, b in enumerate(valid)),  # flips
        lambda: b"\x91" * 2000 + b"\xc0",  # nesting far past the depth limit
        lambda: b"\xdd\xff\xff\xff\xff",  # an array32 header claiming 4 billion items
        lambda: b"\x90" * 60_000,  # memory amplification: many empty arrays (trailing data)
        lambda: msgpack.packb({"v": 1, "id": f"f{i}", "kind": "audit", "code": "x" * 70_000}),  # missing fields
        lambda: msgpack.packb({"v": 1, "id": f"f{i}", "kind": "tool_result", "call": "c1", "ok": "yes"}),
        lambda: msgpack.packb({"v": 9, "id": f"f{i}", "kind": "ping"}),  # unknown version
        lambda: msgpack.packb({"v": 1, "id": f"f{i}", "kind": "ping", "x": msgpack.ExtType(5, b"x")}),  # ext
    ]
    frame = shapes[i % len(shapes)]()
    return [frame, b"second frame"] if i % 97 == 0 else [frame]  # some multi-frame messages too


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def drain(wire, barrier: str) -> list[dict]:
    """Every reply up to the pong of ``barrier`` (the daemon answers in order)."""
    await wire.send("ping", barrier)
    replies = []
    for _ in range(BURST * 3):
        msg = await wire.recv(60)
        if msg["id"] == barrier:
            return replies
        replies.append(msg)
    raise AssertionError(f"no pong for {barrier}")


async def test_ten_thousand_bad_frames_leave_the_daemon_serving(curve_daemon, keyring):
    rng = random.Random(6)
    pid = curve_daemon.proc.pid
    async with keyring.wire(curve_daemon.endpoint, "alice") as wire:
        before = (await wire.ask("status", "s0"))["status"]
        rss_before = rss_kib(pid)
        replies = []
        for start in range(0, TOTAL - OVERSIZED, BURST):
            for i in range(start, min(start + BURST, TOTAL - OVERSIZED)):
                await wire.send_raw(*malformed(rng, i))
            replies += await drain(wire, f"b{start}")
        assert len(replies) == TOTAL - OVERSIZED
        assert {m["kind"] for m in replies} == {"error"}
        assert {m["code"] for m in replies} <= {"bad_request", "version"}

        for _ in range(OVERSIZED):
            await wire.send_raw(b"\x00" * (protocol.MAX_FRAME_BYTES + 1024))
        for attempt in range(30):  # the connection was dropped; the DEALER reconnects by itself
            await wire.send("ping", f"after{attempt}")
            try:
                if (await wire.next_for(f"after{attempt}", timeout=2))["kind"] == "pong":
                    break
            except TimeoutError:
                continue
        msgs = await wire.request("audit", "normal", **audit_fields("normal"))
        assert msgs[-1]["kind"] == "done"
        after = (await wire.ask("status", "s1"))["status"]
    rss_after = rss_kib(pid)
    print(f"daemon RSS {rss_before / 1024:.0f} MiB -> {rss_after / 1024:.0f} MiB after {TOTAL} bad frames")
    assert after["bad_frames"] - before["bad_frames"] == TOTAL - OVERSIZED
    assert rss_after < rss_before + 256 * 1024  # generous: no per-frame leak, no buffered flood
    assert curve_daemon.proc.poll() is None
