"""A client can neither cancel, answer nor read another client's request, even under the same request id."""

from __future__ import annotations

import zmq

from tests.support.daemon import audit_fields

GENUINE = "\n".join(f"line {i}: int v{i} = a[{i}] * {i};" for i in range(30))  # many tokens in the prompt


async def held_request(wire, msg_id: str) -> dict:
    await wire.send("audit", msg_id, **audit_fields("holder"))
    return await wire.until(msg_id, "tool_request")


async def test_another_key_cannot_cancel_or_answer_a_request_with_the_same_id(curve_daemon, keyring):
    async with keyring.wire(curve_daemon.endpoint, "alice") as alice:
        # Control: the genuine answer alone, to know how long the continued prompt is.
        request = await held_request(alice, "control")
        await alice.send("tool_result", "control", call=request["call"], ok=True, result=GENUINE)
        control = (await alice.finish("control"))[-1]

        async with keyring.wire(curve_daemon.endpoint, "bob") as bob:
            request = await held_request(alice, "same")
            await bob.send("cancel", "same")
            await bob.send("tool_result", "same", call=request["call"], ok=True, result="FORGED")
            await bob.send("audit", "same", **audit_fields("holder"))  # bob's own request of that id is his
            assert (await bob.until("same", "tool_request"))["call"] == "c1"
            assert (await bob.ask("ping", "b"))["kind"] == "pong"
            await bob.send("cancel", "same")
            assert [m["kind"] for m in await bob.finish("same")] == ["cancelled"]

        await alice.send("tool_result", "same", call=request["call"], ok=True, result=GENUINE)
        msgs = await alice.finish("same")
    assert msgs[-1]["kind"] == "done"  # not cancelled by bob
    # the continuation was prompted with alice's answer, not bob's forged one
    assert msgs[-1]["stats"]["turns"][1]["prompt_tokens"] == control["stats"]["turns"][1]["prompt_tokens"]
    assert "tool_result for no waiting call (same, call c1): ignored" in curve_daemon.log_text()


async def test_a_reused_routing_id_does_not_take_over_another_clients_results(curve_daemon, keyring):
    """ROUTER_HANDOVER stays off: a second connection claiming the victim's routing id gets nothing."""
    async with keyring.wire(curve_daemon.endpoint, "alice", routing_id=b"victim") as alice:
        request = await held_request(alice, "v")
        async with keyring.wire(curve_daemon.endpoint, "bob", routing_id=b"victim") as thief:
            assert thief.sock.getsockopt(zmq.ROUTING_ID) == b"victim"
            await alice.send("tool_result", "v", call=request["call"], ok=True, result=GENUINE)
            assert (await alice.finish("v"))[-1]["kind"] == "done"
            try:  # bounded wait: anything of alice's that reached the thief would be here by now
                stolen = await thief.recv(2)
            except TimeoutError:
                stolen = None
        assert stolen is None


async def test_the_open_request_limit_is_per_key_not_per_connection(curve_daemon, keyring):
    async with keyring.wire(curve_daemon.endpoint, "alice") as one, keyring.wire(curve_daemon.endpoint, "alice") as two:
        ids = [(one if i % 2 else two, f"lim{i}") for i in range(8)]  # --max-open-per-client 8, over two sockets
        for wire, msg_id in ids:
            await held_request(wire, msg_id)
        refused = await one.request("audit", "lim-extra", **audit_fields("holder"))
        assert [(m["kind"], m.get("code")) for m in refused] == [("error", "busy")]
        async with keyring.wire(curve_daemon.endpoint, "bob") as bob:  # another key is not affected
            await held_request(bob, "bob-1")
            await bob.send("cancel", "bob-1")
            assert (await bob.finish("bob-1"))[-1]["kind"] == "cancelled"
        for wire, msg_id in ids:
            await wire.send("cancel", msg_id)
            assert (await wire.finish(msg_id))[-1]["kind"] == "cancelled"
