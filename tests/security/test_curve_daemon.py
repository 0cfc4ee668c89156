"""CurveZMQ on the real daemon process: who gets in, how the others are told, and revocation without restart."""

from __future__ import annotations

import asyncio

import pytest

from k3lsp.core.client import ClientOptions, DaemonClient, DaemonError
from tests.support.daemon import audit_fields

REFUSAL_BOUND = 20  # seconds: a refused client is told why within this (the client's connect timeout is 3 s)


async def collect(client: DaemonClient, unit: str, **extra) -> list[dict]:
    return [m async for m in client.stream("audit", audit_fields(unit, **extra))]


async def test_authorised_client_audits_and_untrusted_findings_are_dropped(curve_daemon, keyring):
    async with keyring.client(curve_daemon.endpoint, "alice") as client:
        assert client.welcome["kind"] == "welcome"
        msgs = await asyncio.wait_for(collect(client, "liar"), 120)
    findings = [m["finding"] for m in msgs if m["kind"] == "finding"]
    assert [(f["cwe"], f["start_line"], f["end_line"]) for f in findings] == [(787, 2, 3)]
    assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["dropped_findings"] == 6
    log = curve_daemon.log_text()
    assert "outside the unit's 4" in log and log.count("dropped invalid finding") >= 6


@pytest.mark.parametrize(
    ("client", "server", "code"),
    [("mallory", None, "unauthorized"), ("alice", "other", "server_key"), (None, None, "security_mismatch")],
    ids=["unauthorised key", "wrong server key", "plain client"],
)
async def test_refused_clients_are_told_why_while_the_authorised_one_keeps_working(
    curve_daemon, keyring, client, server, code
):
    async with keyring.wire(curve_daemon.endpoint, "alice") as alice:
        await alice.send("audit", "held", **audit_fields("holder"))
        request = await alice.until("held", "tool_request")  # alice's request is open, waiting on her

        if client is None:
            options = ClientOptions(endpoint=curve_daemon.endpoint, connect_timeout=3.0)
        else:
            options = keyring.options(
                curve_daemon.endpoint, client, server=keyring.other_server_public if server else None
            )
        refused = DaemonClient(options)
        try:
            with pytest.raises(DaemonError) as err:
                await asyncio.wait_for(refused.connect(), REFUSAL_BOUND)
        finally:
            await refused.close()
        assert err.value.code == code
        assert curve_daemon.endpoint in str(err.value)

        assert (await alice.ask("ping", "still-here"))["kind"] == "pong"
        await alice.send("tool_result", "held", call=request["call"], ok=True, result="int f(int n)\n{")
        msgs = await alice.finish("held")
        assert msgs[-1]["kind"] == "done"


async def test_a_revoked_key_is_refused_from_the_next_message_and_reload_needs_no_restart(curve_daemon, keyring):
    endpoint = curve_daemon.endpoint
    with pytest.raises(DaemonError) as err:  # "late" is not in authorized/ yet
        async with keyring.client(endpoint, "late"):
            pass
    assert err.value.code == "unauthorized"

    keyring.authorize("late")  # picked up on the next handshake: no restart
    async with keyring.wire(endpoint, "late") as late:
        assert (await late.ask("hello", "h1", client="t", version="0"))["kind"] == "welcome"
        await late.send("audit", "open", **audit_fields("holder"))
        request = await late.until("open", "tool_request")

        keyring.revoke("late")  # while connected, with a request open
        await late.send("tool_result", "open", call=request["call"], ok=True, result="x")
        end = await late.until("open", "error")
        assert end["code"] == "unauthorized"
        reply = await late.ask("ping", "p2")
        assert reply["kind"] == "error" and reply["code"] == "unauthorized"
        status_probe = await late.ask("status", "s2")
        assert status_probe["kind"] == "error" and status_probe["code"] == "unauthorized"

    with pytest.raises(DaemonError) as err:  # a new connection is refused at the handshake
        async with keyring.client(endpoint, "late"):
            pass
    assert err.value.code == "unauthorized"

    async with keyring.client(endpoint, "alice") as alice:  # the others never noticed
        status = await alice.status()
    assert status["unauthorized"] >= 2 and status["open_requests"] == 0
    assert "no longer in the authorized keys" in curve_daemon.log_text()


async def test_terminal_messages_are_exactly_one_after_revocation(curve_daemon, keyring):
    """A revoked client's in-flight request ends once: its own error, not a second refusal of the same id."""
    keyring.authorize("late")
    try:
        async with keyring.wire(curve_daemon.endpoint, "late") as late:
            await late.send("audit", "r", **audit_fields("holder"))
            request = await late.until("r", "tool_request")
            keyring.revoke("late")
            await late.send("tool_result", "r", call=request["call"], ok=True, result="x")
            end = await late.until("r", "error")
            await late.send("ping", "barrier")  # answered (refused) after anything still queued for "r"
            after = []
            for _ in range(10):
                msg = await late.recv(30)
                if msg["id"] == "barrier":
                    break
                after.append(msg)
        assert end["code"] == "unauthorized"
        assert [m for m in after if m["id"] == "r"] == []
    finally:
        if (keyring.authorized / "late.key").exists():
            keyring.revoke("late")


async def test_a_revoked_key_that_stays_silent_loses_its_open_request(curve_daemon, keyring):
    """The request waits for our tool answer, which never comes: revocation alone must end it, within seconds
    (not at the tool timeout, and not only when the client speaks again)."""
    keyring.authorize("late")
    try:
        async with keyring.wire(curve_daemon.endpoint, "late") as late:
            await late.send("audit", "quiet", **audit_fields("holder"))
            await late.until("quiet", "tool_request")
            keyring.revoke("late")
            end = await late.until("quiet", "error", timeout=5)  # the daemon sweeps open requests every 0.05 s here
        assert end["code"] == "unauthorized"
    finally:
        if (keyring.authorized / "late.key").exists():
            keyring.revoke("late")
