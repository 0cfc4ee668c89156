"""Text from a client or the model cannot decide how `k3-backend supervise` reads the daemon's end, nor forge
a line of the daemon's log.

`mlx.launch` reports a rank's end with a line "Node with rank N exited with code C" on the stream that also
carries the ranks' own output, and the daemon logs what clients send (a tool_result's call id) and what the
model writes (a finding's severity). Shown here on the real `supervise` around a real `serve`: both carrying
that line, then SIGKILL of the daemon, and the supervisor must start it again, not say "exited cleanly".
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys
from pathlib import Path

from backend import supervise
from k3lsp.wire import sanitize
from tests.pair.test_supervise import Supervised
from tests.support import kimi
from tests.support.daemon import Wire, audit_fields

FORGED = "Node with rank 0 exited with code 0"


def script() -> list[dict]:
    return [{"unit": "forger", "turns": [kimi.turn(("report_finding", kimi.finding(severity=FORGED)))]}]


def supervised(tiny_model: Path, tmp: Path) -> Supervised:
    """`k3-backend supervise -- k3-backend serve ...` (one daemon, its own rank 0) with the forging script."""
    script_file = tmp / "script.json"
    script_file.write_text(json.dumps(script()))
    serve = [sys.executable, "-m", "backend.cli", "serve", "--model", str(tiny_model), "--bind", endpoint(tmp)]
    serve += ["--trust-remote-code", "--no-store", "--script", str(script_file)]
    return Supervised(serve, ["--backoff", "0.2", "--max-failures", "3"], tmp / "supervise.log")


def endpoint(tmp: Path) -> str:
    return f"ipc://{tmp}/sock/daemon.sock"


async def test_a_forged_exit_line_in_a_tool_result_or_a_finding_does_not_stop_the_restart(tiny_model, tmp_path):
    sup = supervised(tiny_model, tmp_path)
    try:
        assert sup.wait_ready(1) == endpoint(tmp_path)
        (first,) = sup.children()
        async with Wire(endpoint(tmp_path), timeout=120) as wire:
            await wire.send("tool_result", "t1", call=f"c1\n{FORGED}", ok=True, result="")  # the client's text
            msgs = await wire.request("audit", "a1", **audit_fields("forger"))  # the model's text
            assert msgs[-1]["kind"] == "done" and msgs[-1]["stats"]["dropped_findings"] == 1, msgs[-1]
            assert (await wire.ask("ping", "p"))["kind"] == "pong"  # the tool_result was read and logged by now
        log = sup.log.read_text()
        assert log.count(FORGED) >= 2, log[-3000:]  # both are in the daemon's log
        assert not any(line.startswith(FORGED) for line in log.splitlines()), log[-3000:]  # but no line of its own
        assert f"c1\\n{FORGED}" in log
        os.kill(first, signal.SIGKILL)
        sup.wait_ready(2)
        assert sup.children() != [first]
        async with Wire(endpoint(tmp_path), timeout=120) as wire:
            assert (await wire.ask("ping", "p"))["kind"] == "pong"
    finally:
        sup.stop()
    log = sup.log.read_text()
    assert "exited cleanly" not in log, log[-3000:]
    assert "the pair failed (while serving: killed by SIGKILL; rank 0 killed by SIGKILL; 1 in a row)" in log, log[
        -3000:
    ]


def test_the_supervisor_takes_no_exit_code_from_output(monkeypatch):
    """Only the ranks' status files and the command's own exit count: a launcher's line, or anything that looks
    like one, on the stream the ranks write to is passed through and kept for the log tail, nothing more."""
    run = supervise.Run()
    err = io.BytesIO(f"[rank 0] loading\n{FORGED}\n\x1b[33m[WARN] Node with rank 1 was killed \x1b[0m\n".encode())
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BytesIO()))
    supervise._pass_stderr(err, run)
    assert run.codes == {} and len(run.tail) == 3
    assert not supervise.Run(codes={1: 0}).clean()  # rank 0, which decides a stop, said nothing
    assert supervise.Run(codes={0: 0, 1: 0}).clean() and supervise.Run(codes={0: 0}).clean()


def test_a_log_record_is_one_line_and_a_traceback_cannot_pass_for_one():
    """The daemon's and the language server's one log formatter (k3lsp.wire.sanitize.Formatter): a message built from
    client or model text keeps to its line, with its controls written as escapes; a traceback keeps its lines,
    each behind a gutter, so a line break inside an exception's message starts no record either."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(sanitize.Formatter("%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("forgery-test")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("tool_result for call %s", f"c1\n{FORGED}\r\x1b]0;title\x07\u202e")
        try:
            raise ValueError(f"bad value\nINFO backend.daemon: {FORGED}")
        except ValueError:
            log.exception("request %s failed", "r1\nINFO forged")
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"WARNING forgery-test: tool_result for call c1\\n{FORGED}\\r\\x1b]0;title\\x07\\u202e"
    assert lines[1] == "ERROR forgery-test: request r1\\nINFO forged failed"
    assert len(lines) > 3 and all(line.startswith(sanitize.TRACE_GUTTER) for line in lines[2:]), lines
    assert any(line == f"{sanitize.TRACE_GUTTER}INFO backend.daemon: {FORGED}" for line in lines[2:]), lines


def test_serve_logs_through_the_one_formatter_on_a_pair_too():
    """`serve` on a pair prefixes its lines with the rank: still through the escaping formatter."""
    from backend import serve

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [logging.StreamHandler(io.StringIO())]
    try:
        serve._log_rank(1, 2)
        assert all(isinstance(h.formatter, sanitize.Formatter) for h in root.handlers)
    finally:
        root.handlers = saved
