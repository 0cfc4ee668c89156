"""The packaged .vsix in the real VS Code workbench (code-server 4.139.1, VS Code 1.139.1), driven in Chromium.

Everything is real: the workbench from the npm registry run by Node 24, Debian's Chromium driven by
playwright-core (tests/editors/workbench/drive.js), the extension installed from the .vsix that
editors/vscode builds, the `k3lsp` server from this environment and a `k3-backend serve` on the tiny
checkpoint with scripted answers, all on 127.0.0.1. The scenario: a header activates the extension while
its server command is wrong (one error, status "server stopped"); the C file is edited and saved; the
settings are fixed and the extension recovers by itself and audits that save; the Problems panel lists the
findings; a restart shows them again from the cache without a save; a hover shows the finding once; the
backend status names the endpoint, model and rates; the suggested fix applies.

The pieces are cached under .cache/workbench. Where one cannot be had (e.g. no Chromium on a Mac), the test is
skipped with the reason and what to install; under CI (CI=true) it fails instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lsp import scripted
from tests.support import kimi, workbench
from tests.support.daemon import serving
from tests.support.peer import WELCOME, peer, reply

DRIVER = Path(__file__).resolve().parent / "workbench" / "drive.js"
ATTACK = Path(__file__).resolve().parent / "workbench" / "attack.js"
DRIVER_TIMEOUT = 240  # seconds; every wait inside the driver is bounded well below this
# Nothing but the scenario: no chat panel, welcome page, update checks or telemetry.
QUIET = {
    "chat.disableAIFeatures": True,
    "workbench.startupEditor": "none",
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "telemetry.telemetryLevel": "off",
}
NO_GALLERY = {"serviceUrl": "http://127.0.0.1:9/gallery", "itemUrl": "http://127.0.0.1:9/items"}
HEADER = "int copy_msg_checked(const char *src, int n);\n"


def _require_workbench() -> Path:
    try:
        workbench.ensure_code_server()
        chromium = workbench.ensure_chromium()
        workbench.ensure_vsix()
    except workbench.Missing as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the VS Code workbench test cannot run in CI: {exc}")
        pytest.skip(f"VS Code workbench test skipped: {exc}")
    return chromium


def _server_env(tmp_path: Path) -> dict[str, str]:
    """code-server's environment: a private result cache, and the extension gallery pointed at a closed loopback
    port (the workbench reaches nothing outside)."""
    return {"K3LSP_CACHE_DIR": str(tmp_path / "k3cache"), "EXTENSIONS_GALLERY": json.dumps(NO_GALLERY)}


def _drive(script: Path, server: workbench.CodeServer, chromium: Path, tmp_path: Path, extra: dict[str, str]):
    """Run a driver against the workbench: (what it printed, by tag; a report for failures; the k3lsp output
    channel; its trace channel). Fails the test unless the driver ran every step."""
    driver_env = (
        os.environ
        | {
            "K3_PLAYWRIGHT": str(workbench.MODULES / "playwright-core"),
            "K3_CHROMIUM": str(chromium),
            "K3_PROFILE": str(tmp_path / "chromium-profile"),
            "K3_URL": server.url,
            "K3_WORKSPACE": str(server.workspace),
            "K3_SCREENSHOT": str(
                workbench.CACHE.parent / f"{script.stem}-failure.png"
            ),  # kept for a look after the run
        }
        | extra
    )
    done = subprocess.run(
        [str(workbench.NODE_BIN), str(script)],
        env=driver_env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT,
        check=False,
    )
    (workbench.CACHE.parent / f"{script.stem}-last-run.txt").write_text(done.stdout)  # what the workbench showed
    seen = dict(_lines(done.stdout))
    output, traces = server.output_log("k3lsp"), server.output_log("k3lsp trace")
    report = (
        f"{done.stdout}\n{done.stderr[-3000:]}\ncode-server log:\n{server.log_text()[-3000:]}\n"
        f"k3lsp output:\n{output[-6000:]}\nextension host log:\n{server.output_log('exthost')[-6000:]}"
    )
    assert seen.get("END") is True, report
    return seen, report, output, traces


def _lines(stdout: str) -> list[tuple[str, object]]:
    out = []
    for line in stdout.splitlines():
        tag, _, payload = line.partition(" ")
        if tag.isupper() and payload:
            out.append((tag, json.loads(payload)))
    return out


@pytest.mark.timeout(900)  # a cold first run also installs code-server, Node 24, Chromium and builds the .vsix
def test_packaged_extension_in_the_real_workbench(tiny_model, tmp_path, capsys):
    chromium = _require_workbench()
    started = time.monotonic()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "demo.c").write_text(scripted.DEMO_C)
    (ws / "demo.h").write_text(HEADER)
    with serving(tiny_model, script=scripted.SCRIPT, args=scripted.DAEMON_ARGS) as daemon:
        common = {"k3lsp.endpoint": daemon.endpoint}  # `machine` settings: the remote settings of code-server
        broken = common | {"k3lsp.server.path": str(tmp_path / "no-such-k3lsp")}
        fixed = common | {"k3lsp.server.python": sys.executable}
        user = QUIET | {"k3lsp.trace.server": "messages"}
        with workbench.code_server(ws, user, machine=broken, env=_server_env(tmp_path)) as server:
            driver = {
                "K3_SETTINGS": str(server.machine_settings),
                "K3_GOOD_SETTINGS": json.dumps(fixed, indent=2),
                "K3_FILE": str(ws / "demo.c"),
                "K3_FINDING_LINE": str(scripted.COPY_MSG_LINE + 1),
                "K3_FIX": "min_t(int, n, sizeof(m->buf))",
            }
            seen, report, output, traces = _drive(DRIVER, server, chromium, tmp_path, driver)
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nVS Code workbench end-to-end: {elapsed:.1f} s (driver {seen['ELAPSED'] / 1000:.1f} s)")

    assert "server stopped" in seen["FAILED_START"], report
    # One cause, one message: the extension's, naming the command and pointing at the settings.
    errors = seen["ERROR_TOASTS"]
    assert len(errors) == 1 and "no-such-k3lsp" in errors[0], errors

    # The save made while no server ran was audited once the server came up.
    problems = seen["PROBLEMS"]
    assert any("memcpy overflows buf" in row and "CWE-787" in row for row in problems), problems
    assert any("unchecked index" in row and "CWE-129" in row for row in problems), problems
    assert seen["STATUS"] == "k3: idle", seen["STATUS"]

    # A restart shows the cached findings again without a save.
    assert "k3: idle" not in seen["RESTARTING"], seen["RESTARTING"]
    assert any("memcpy overflows buf" in row for row in seen["RESTARTED"]), seen["RESTARTED"]
    assert seen["STATUS_RESTARTED"] == "k3: idle"

    hover = seen["HOVER"]
    assert hover.count("memcpy overflows buf") == 1, hover
    assert hover.count("n comes from the caller") == 1, hover
    assert "min_t(int, n, sizeof(m->buf))" in hover, hover  # the suggested fix, which the diagnostic lacks

    status = seen["BACKEND_STATUS"]
    for part in (f"endpoint {daemon.endpoint}", "model ", "tiny", "ranks 1", "queue 0", "loop rate", "stop rate"):
        assert part in status, (part, status)

    assert any("Apply suggested fix" in a for a in seen["ACTIONS"]), seen["ACTIONS"]
    assert "\tmemcpy(m->buf, src, min_t(int, n, sizeof(m->buf)));" in seen["FIXED"].split("\n")

    # k3lsp.trace.server alone turns the LSP traffic log on; the server (its stderr is in the output channel)
    # logs no noise about cancelled hovers and code actions.
    assert "Sending notification 'textDocument/didOpen'" in traces, traces[-2000:]
    assert "k3lsp: could not start the language server" in output, output[-2000:]
    assert "Cancel notification for unknown message id" not in output, output[-2000:]


# The attacks: text from the model and the daemon carrying `command:` links, and a
# repository whose own .vscode/settings.json names the server program, the daemon, keys and `insecure`.
COMMAND = "command:workbench.action.openSettings"
LINK_TEXT = "Apply the verified patch"
LINK = f"[{LINK_TEXT}]({COMMAND})"
LINKED = kimi.finding(
    cwe=787, severity="high", title=f"memcpy overflows buf {LINK}", message=f"Click {LINK} or <{COMMAND}>.",
    start_line=3, end_line=3, trace=[{"line": 3, "note": f"copied {LINK}"}],
    fix={"start_line": 3, "end_line": 3, "replacement": "\tmemcpy(m->buf, src, sizeof(m->buf));"},
)  # fmt: skip


class _LinkingDaemon:
    """A daemon (a scripted ROUTER, tests/support/peer.py) whose model name, finding, reasoning, explanation and
    status carry `command:` links: what a steered model, someone else's daemon or the team store can send."""

    async def __call__(self, sock, ident, msg) -> None:
        kind, msg_id = msg["kind"], msg["id"]
        if kind == "hello":
            await reply(sock, ident, "welcome", msg_id, **(WELCOME | {"model": LINK, "fingerprint": "f" * 64}))
        elif kind == "status":
            status = {"state": "ready", "model": LINK, "ranks": 1, "queued": 0, "active": 0}
            await reply(sock, ident, "status", msg_id, status=status | {"loop_rate": 0.0, "stop_rate": 1.0})
        elif kind == "audit":
            if msg["unit"] == "copy_msg":
                finding = LINKED | {"reasoning": f"The maintainers ship a fix: {LINK}"}
                await reply(sock, ident, "finding", msg_id, finding=finding)
            await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})
        elif kind == "explain":
            await reply(sock, ident, "text", msg_id, text=f"To fix it, {LINK}.")
            await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})


@contextlib.contextmanager
def _linking_daemon() -> Iterator[str]:
    """The _LinkingDaemon on its own event loop in a thread, for as long as the workbench runs: its endpoint."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving = peer(_LinkingDaemon())
    endpoint = asyncio.run_coroutine_threadsafe(serving.__aenter__(), loop).result(10)
    try:
        yield endpoint
    finally:
        asyncio.run_coroutine_threadsafe(serving.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def _listener() -> Iterator[tuple[str, list]]:
    """A TCP port on 127.0.0.1 that records who connects: the repository's "daemon"."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.2)
    connected: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, peer = sock.accept()
                connected.append(peer)
                conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}", connected
    finally:
        stop.set()
        thread.join(5)
        sock.close()


@pytest.mark.timeout(900)
def test_a_repository_and_the_model_cannot_make_the_workbench_act(tmp_path, capsys):
    chromium = _require_workbench()
    started = time.monotonic()
    ws = tmp_path / "ws"
    (ws / ".vscode").mkdir(parents=True)
    (ws / "demo.c").write_text(scripted.DEMO_C)
    marker = tmp_path / "the-repository-ran-its-program"
    evil = ws / "tools" / "k3lsp"
    evil.parent.mkdir()
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexec sleep 60\n")
    evil.chmod(0o755)
    with _listener() as (attacker, connected), _linking_daemon() as endpoint:
        repository = {
            "k3lsp.server.path": str(evil),
            "k3lsp.server.python": str(evil),
            "k3lsp.endpoint": attacker,
            "k3lsp.serverKey": str(ws / "attacker.key"),
            "k3lsp.clientKey": str(ws / "me.key_secret"),
            "k3lsp.insecure": True,
        }
        (ws / ".vscode" / "settings.json").write_text(json.dumps(repository, indent=2))
        machine = {"k3lsp.server.python": sys.executable, "k3lsp.endpoint": endpoint}
        with workbench.code_server(ws, QUIET, machine=machine, env=_server_env(tmp_path)) as server:
            extra = {"K3_FINDING_LINE": str(scripted.COPY_MSG_LINE + 1), "K3_LINK_TEXT": LINK_TEXT}
            seen, report, *_ = _drive(ATTACK, server, chromium, tmp_path, extra)
    with capsys.disabled():
        print(f"\nVS Code workbench, attacks: {time.monotonic() - started:.1f} s")

    # The repository chose nothing: the user's server and daemon ran, its own program and daemon never did.
    assert not marker.exists(), report
    assert connected == [], connected
    assert any("memcpy overflows buf" in row for row in seen["PROBLEMS"]), report
    assert seen["STATUS"] == "k3: idle"

    # The model's and the daemon's words are shown, and no element the workbench made of them is a link.
    assert LINK_TEXT in seen["HOVER"], seen["HOVER"]
    for link in seen["HOVER_LINKS"]:  # the CWE's page and the hover's own actions (View Problem, Quick Fix)
        assert LINK_TEXT not in link["text"] and "command:workbench" not in link["href"], seen["HOVER_LINKS"]
    assert any(LINK_TEXT in action for action in seen["ACTIONS"]) and seen["ACTION_LINKS"] == [], seen["ACTIONS"]
    for shown in ("EXPLAIN", "BACKEND_STATUS"):
        assert LINK_TEXT in seen[shown]["text"] and seen[shown]["links"] == [], (shown, seen[shown])
    assert COMMAND.split(":")[1] in seen["BACKEND_STATUS"]["text"]  # the daemon's model name, as text
