"""Every `k3lsp` subcommand ends on SIGINT, SIGTERM and a closed stdout as docs/cli.md says: no traceback, one line
saying what happened, what was done kept (a report, a cache, a resumable run), exit status 130 / 143; a closed
stdout ends it quietly with 141.

Each command runs as a real process against a scripted daemon that answers some units and holds the others
(tests/batch/holding.py), so the signal reaches it in the middle of its work, never before or after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.batch import processes
from tests.batch.holding import Holding, holding
from tests.batch.processes import assert_quiet, reaped
from tests.eval import castle_data, history_repo
from tests.review import repos
from tests.support.batch import k3lsp_env
from tests.variants.tree import DOUBLE_KFREE, plant
from tests.witnesses.test_adapters import needs

WAIT = 60  # seconds for a command to reach its work, and to end after the signal
SIGNALS = [signal.SIGINT, signal.SIGTERM]
BAD_READ = {"cwe": 787, "severity": "high", "title": "user length copied", "message": "n unchecked", "start_line": 3}
BAD_READ["end_line"] = 3
TWO = "int good(int a)\n{\n\treturn a;\n}\n\nint held(int a)\n{\n\treturn a + 1;\n}\n"


@dataclass
class Case:
    """A subcommand at work: its arguments, what the daemon answers, where it works, what it keeps."""

    args: Callable[[Path, str], list[str]]  # (tmp_path, endpoint) -> the arguments after `k3lsp`
    said: str  # in the one line on stderr about the interruption
    answered: dict[str, list[dict]] = field(default_factory=dict)  # unit -> findings; any other unit is held
    hold_status: bool = False
    kept: Callable[[Path, str], None] = lambda tmp_path, out: None  # asserts what the command kept


def _audit(tmp_path: Path, endpoint: str) -> list[str]:
    (tmp_path / "two.c").write_text(TWO)
    return ["audit", "two.c", "--endpoint", endpoint, "--jobs", "1", "--json"]


def _audit_kept(tmp_path: Path, out: str) -> None:
    report = json.loads(out)
    assert report["stats"]["interrupted"] is True
    assert [f["unit"] for f in report["findings"]] == ["good"]  # the unit done before the signal is reported


def _review(tmp_path: Path, endpoint: str) -> list[str]:
    repo = repos.repository(tmp_path / "repo", {"drv.c": repos.DRIVER_C})
    repos.commit(repo, {"drv.c": repos.DRIVER_PATCHED}, "drv: a patch")
    out = tmp_path / "review.sarif"
    return [
        "review",
        "-C",
        str(repo),
        "HEAD",
        "--endpoint",
        endpoint,
        "--jobs",
        "1",
        "--format",
        "sarif",
        "-o",
        str(out),
    ]


def _review_kept(tmp_path: Path, out: str) -> None:
    sarif = json.loads((tmp_path / "review.sarif").read_text())
    results = [r for run in sarif["runs"] for r in run["results"]]
    assert [r["ruleId"] for r in results] == ["CWE-787"]  # drv_read, reviewed before the signal
    invocation = sarif["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] in (130, 143)


def _castle(tmp_path: Path, endpoint: str) -> list[str]:
    dataset = castle_data.write(tmp_path / "castle.json", castle_data.dataset())
    return ["eval", "castle", str(dataset), "--endpoint", endpoint, "--out", str(tmp_path / "out"), "--jobs", "1"]


def _fixes(tmp_path: Path, endpoint: str) -> list[str]:
    h = history_repo.build(tmp_path)
    return [
        "eval",
        "fixes",
        "--repo",
        str(h.repo),
        "--endpoint",
        endpoint,
        "--out",
        str(tmp_path / "out"),
        "--jobs",
        "1",
    ]


def _variants(tmp_path: Path, endpoint: str) -> list[str]:
    """A double kfree's variants, searched with a rule given (no model asked for one): the candidate's triage is
    the work a signal reaches."""
    needs("coccinelle")
    tree, rule = plant(tmp_path.resolve() / "ws"), tmp_path / "double.cocci"
    rule.write_text(DOUBLE_KFREE)
    place = f"{tree / 'drivers/usb/b.c'}:14"
    return ["variants", place, "--root", str(tree), "--rule", str(rule), "--endpoint", endpoint]


def _eval_kept(tmp_path: Path, out: str) -> None:
    assert (tmp_path / "out" / "cache").is_dir()  # the run cache --resume goes on from


CASES = {
    "status": Case(
        lambda t, e: ["status", "--endpoint", e, "--timeout", str(WAIT)], "interrupted by", hold_status=True
    ),
    "audit": Case(_audit, "a rerun audits only the rest", {"good": [BAD_READ]}, kept=_audit_kept),
    "review": Case(_review, "a rerun reviews only the rest", {"drv_read": [BAD_READ]}, kept=_review_kept),
    "eval castle": Case(_castle, "--resume", kept=_eval_kept),
    "eval fixes": Case(_fixes, "--resume", kept=_eval_kept),
    "variants": Case(_variants, "k3lsp variants: interrupted by"),
}


def start(args: list[str], tmp_path: Path, *, closed_stdout: bool = False, **env: str) -> subprocess.Popen:
    return processes.start("k3lsp.cli", args, tmp_path, closed_stdout=closed_stdout, **env)


def interrupted(proc: subprocess.Popen, sig: int, working: Callable[[], bool]) -> tuple[str, str]:
    """Send ``sig`` once the command is working; (stdout, stderr) after it ended (bounded)."""
    with reaped(proc):
        assert working(), proc.communicate(timeout=WAIT)
        assert proc.poll() is None, "the command ended before the signal"
        proc.send_signal(sig)
        return proc.communicate(timeout=WAIT)


def assert_ended_by(sig: int, proc: subprocess.Popen, err: str, said: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 128 + sig, err
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and said in lines[0], err  # one line says what happened


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("name", CASES)
def test_a_signal_mid_work_ends_the_command_keeping_what_was_done(tmp_path, name, sig):
    case = CASES[name]
    with holding(case.answered, hold_status=case.hold_status) as daemon:
        proc = start(case.args(tmp_path, daemon.endpoint), tmp_path)
        out, err = interrupted(proc, sig, lambda: daemon.held.wait(WAIT))
    assert_ended_by(sig, proc, err, case.said)
    case.kept(tmp_path, out)


def slow_analyzer(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A `sparse` first on PATH that takes its time to say its version: `k3lsp witnesses` at work. (The
    environment, and the file it touches once it runs.)"""
    bin_dir, started = tmp_path / "bin", tmp_path / "analyzer-started"
    bin_dir.mkdir()
    script = bin_dir / "sparse"
    script.write_text(f"#!/bin/sh\ntouch '{started}'\nexec sleep {WAIT}\n")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, started


def appears(path: Path, proc: subprocess.Popen) -> bool:
    """Wait (bounded) until ``path`` exists, or the process ended."""
    deadline = time.monotonic() + WAIT
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_witnesses_asks_the_analyzers(tmp_path, sig):
    env, started = slow_analyzer(tmp_path)
    proc = start(["witnesses"], tmp_path, **env)
    _, err = interrupted(proc, sig, lambda: appears(started, proc))
    assert_ended_by(sig, proc, err, "k3lsp witnesses: interrupted by")


def blocked_on_fifo(proc: subprocess.Popen) -> bool:
    """Wait (bounded) until the process waits for a reader of a FIFO it opens (Linux: its wait channel)."""
    wchan = Path(f"/proc/{proc.pid}/wchan")
    deadline = time.monotonic() + WAIT
    while proc.poll() is None and time.monotonic() < deadline:
        if wchan.read_text() == "wait_for_partner":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="sees the FIFO wait in /proc")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize(("program", "name"), [("k3lsp.cli", "client"), ("backend.cli", "server")])
def test_a_signal_while_keys_init_writes_ends_it(tmp_path, sig, program, name):
    """`keys init --force` over a key file that is a FIFO nobody reads: the write waits, and the signal ends it."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    os.mkfifo(keys / f"{name}.key")
    args = [sys.executable, "-m", program, "keys", "init", "--dir", str(keys), "--force"]
    proc = subprocess.Popen([*args, "--name", name] if program == "k3lsp.cli" else args, stderr=subprocess.PIPE)
    _, err = interrupted(proc, sig, lambda: blocked_on_fifo(proc))
    prog = "k3lsp keys" if program == "k3lsp.cli" else "k3-backend keys"
    assert_ended_by(sig, proc, err.decode(), f"{prog}: interrupted by")


def on_stdio(tmp_path: Path, args: list[str], sent: bytes, *, reading: bool) -> subprocess.Popen:
    """`k3lsp ARGS` on stdio as its peer starts it, sent ``sent`` (stdin stays open: it ends by itself); with
    ``reading`` False, the peer has already stopped reading its answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "k3lsp.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=k3lsp_env(tmp_path / "cache"),
    )
    if not reading:
        proc.stdout.close()
    proc.stdin.write(sent)
    proc.stdin.flush()
    return proc


def language_server(tmp_path: Path, *, reading: bool = True) -> subprocess.Popen:
    """`k3lsp` as an editor starts it, sent ``initialize``."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}).encode()
    return on_stdio(tmp_path, [], b"Content-Length: %d\r\n\r\n%s" % (len(body), body), reading=reading)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_ends_the_language_server(tmp_path, sig):
    with reaped(language_server(tmp_path)) as proc:
        assert proc.stdout.readline().startswith(b"Content-Length"), "the server did not answer initialize"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=WAIT)
    assert_ended_by(sig, proc, err.decode(errors="replace"), "k3lsp: interrupted by")


def mcp_server(tmp_path: Path, endpoint: str, *, reading: bool = True) -> subprocess.Popen:
    """`k3lsp mcp` as a coding agent starts it, sent ``initialize`` and a call of audit_file on a file of two
    units."""
    (tmp_path / "two.c").write_text(TWO)
    agent = {"name": "test", "version": "1"}
    messages = [
        {"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                      "clientInfo": agent}},
        {"method": "notifications/initialized"},
        {"id": 2, "method": "tools/call", "params": {"name": "audit_file", "arguments": {"path": "two.c"}}},
    ]  # fmt: skip
    sent = b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n" for m in messages)
    return on_stdio(tmp_path, ["mcp", "--root", str(tmp_path), "--endpoint", endpoint], sent, reading=reading)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_mid_audit_ends_the_mcp_server(tmp_path, sig):
    with holding() as daemon, reaped(mcp_server(tmp_path, daemon.endpoint)) as proc:
        assert daemon.held.wait(WAIT), "the audit_file call never reached the daemon"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=WAIT)
    assert_ended_by(sig, proc, err.decode(errors="replace"), "k3lsp mcp: interrupted by")


# --- a closed stdout -----------------------------------------------------------------------------------------


def closed_stdout(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """Run the command with a stdout whose reader is gone before it writes: (process, stderr)."""
    with reaped(start(args, tmp_path, closed_stdout=True)) as proc:
        _, err = proc.communicate(timeout=WAIT)
    return proc, err


PIPED: dict[str, Callable[[Path, Holding], list[str]]] = {
    "status --json": lambda t, d: ["status", "--endpoint", d.endpoint, "--json"],
    "status": lambda t, d: ["status", "--endpoint", d.endpoint],
    "witnesses": lambda t, d: ["witnesses"],
    "audit": lambda t, d: _audit(t, d.endpoint),
    "review": lambda t, d: _review(t, d.endpoint)[:-4],  # the text report, on stdout
    "keys init": lambda t, d: ["keys", "init", "--dir", str(t / "keys")],
    "eval castle": lambda t, d: _castle(t, d.endpoint),
    "eval fixes": lambda t, d: _fixes(t, d.endpoint),
    "variants": lambda t, d: _variants(t, d.endpoint),
}


@pytest.mark.parametrize("name", PIPED)
def test_a_closed_stdout_ends_the_command_quietly(tmp_path, name):
    with holding({"drv_read": [BAD_READ]}, hold=False) as daemon:
        proc, err = closed_stdout(PIPED[name](tmp_path, daemon), tmp_path)
    assert_quiet(proc, err)


def test_a_closed_stdout_ends_the_language_server_quietly(tmp_path):
    """The editor is gone: nobody reads the answers, so the server ends at its first one, as SIGPIPE ends a C
    server (clangd), instead of logging a traceback for every message until stdin closes."""
    with reaped(language_server(tmp_path, reading=False)) as proc:
        proc.wait(WAIT)
        err = proc.stderr.read().decode(errors="replace")
    assert_quiet(proc, err)


def test_a_closed_stdout_ends_the_mcp_server_quietly(tmp_path):
    """The agent is gone: the server ends at its first answer, as the language server does, instead of waiting
    for a stdin that stays open (the SDK's writer failed and its reader went on waiting)."""
    with holding() as daemon, reaped(mcp_server(tmp_path, daemon.endpoint, reading=False)) as proc:
        proc.wait(WAIT)
        err = proc.stderr.read().decode(errors="replace")
    assert_quiet(proc, err)
