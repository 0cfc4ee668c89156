"""A frozen editor (SIGSTOP mid-stream, its socket full) does not delay another client's results.

The frozen client is a separate process started here and stopped by PID. The healthy client's time is
measured without and with the frozen one present and printed; the assertion is only that the healthy
requests finish, and that the daemon drops the frozen client's request on its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

from tests.support.daemon import REPO, audit_fields

ROUNDS = 3


async def healthy_round(keyring, endpoint: str) -> float:
    start = time.monotonic()
    async with keyring.client(endpoint, "alice") as client:
        for i in range(ROUNDS):
            fields = audit_fields(f"healthy{i}", code=f"int h{i}(void)\n{{\n\treturn {i};\n}}\n")
            msgs = [m async for m in client.stream("audit", fields)]
            assert msgs[-1]["kind"] == "done", msgs[-1]
    return time.monotonic() - start


def start_frozen(keyring, endpoint: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.stream_client",
            endpoint,
            str(keyring.server_public),
            str(keyring.clients["bob"][1]),
            "chatty",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(90)
    assert line == ["streaming\n"], line
    return proc


async def test_a_frozen_client_does_not_delay_another_clients_results(curve_daemon, keyring):
    endpoint = curve_daemon.endpoint
    alone = await asyncio.wait_for(healthy_round(keyring, endpoint), 120)
    async with keyring.client(endpoint, "alice") as client:
        before = await client.status()

    frozen = start_frozen(keyring, endpoint)
    try:
        frozen.send_signal(signal.SIGSTOP)
        with_frozen = await asyncio.wait_for(healthy_round(keyring, endpoint), 120)
        print(
            f"healthy client, {ROUNDS} audits: alone {alone:.2f} s, with a frozen client {with_frozen:.2f} s "
            f"(ratio {with_frozen / alone:.2f})"
        )

        async with keyring.client(endpoint, "alice") as client:  # the daemon lets go of the frozen request
            for _ in range(120):
                status = await client.status()
                if status["open_requests"] == 0:
                    break
                await asyncio.sleep(0.5)
        assert status["open_requests"] == 0
        assert status["vanished"] == before["vanished"] + 1
        assert frozen.poll() is None  # still stopped, not crashed: the daemon gave up on it
    finally:
        frozen.send_signal(signal.SIGCONT)
        frozen.kill()
        frozen.wait(30)
        frozen.stdout.close()
