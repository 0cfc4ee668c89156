"""`k3-backend`'s subcommands end on SIGINT, SIGTERM and a closed stdout as docs/cli.md says, and the README's first
command (`k3-backend demo`) says what each of its phases does.

The demo's audit runs against the holding daemon of tests/batch/holding.py (`demo --endpoint`: no model needed),
so a signal reaches it mid-audit; on the tiny checkpoint the signal comes while the daemon it started loads, and
the daemon must not outlive the demo.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.batch import processes
from tests.batch.holding import holding
from tests.batch.processes import assert_quiet, reaped

WAIT = 120  # seconds for a command to reach its work, and to end after the signal
SIGNALS = [signal.SIGINT, signal.SIGTERM]
ONE_UNIT = "int one(int a)\n{\n\treturn a;\n}\n"


def start(args: list[str], tmp_path: Path, *, closed_stdout: bool = False, **env: str) -> subprocess.Popen:
    return processes.start("backend.cli", args, tmp_path, closed_stdout=closed_stdout, **env)


class Lines:
    """A process's stdout read in a thread (bounded waits for a line), kept whole for the asserts."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()
        with self._new:
            self.lines.append("")  # the end
            self._new.notify_all()

    def wait_for(self, text: str) -> bool:
        """Whether ``text`` came (bounded), before stdout ended."""
        with self._new:
            self._new.wait_for(lambda: self.lines[-1:] == [""] or any(text in line for line in self.lines), WAIT)
            return any(text in line for line in self.lines)


def ended_by(sig: int, proc: subprocess.Popen, send: Callable[[], None]) -> str:
    """Send ``sig`` now; the stderr of the process once it ended (bounded)."""
    with reaped(proc):
        proc.send_signal(sig)
        send()
        proc.wait(WAIT)
        return proc.stderr.read()


def assert_ended_by(sig: int, proc: subprocess.Popen, err: str, prog: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 128 + sig, err
    assert err.splitlines()[-1] == f"{prog}: interrupted by {signal.Signals(sig).name}", err


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_mid_audit_ends_the_demo_and_its_audit_keeping_what_was_done(tmp_path, sig):
    (tmp_path / "two.c").write_text(ONE_UNIT + "\nint held(int a)\n{\n\treturn a + 1;\n}\n")
    with holding({"one": []}) as daemon:
        proc = start(["demo", "two.c", "--endpoint", daemon.endpoint], tmp_path)
        assert daemon.held.wait(WAIT), proc.communicate(timeout=WAIT)
        err = ended_by(sig, proc, lambda: None)
    assert_ended_by(sig, proc, err, "k3-backend demo")
    assert "interrupted: 1 of 2 units done" in err  # the audit it ran got the signal, and kept the unit it had


def daemons_under(root: Path) -> list[int]:
    """PIDs of the processes whose command line names ``root`` (a daemon the demo started there)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(root).encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the daemon's process in /proc")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_the_daemon_loads_ends_the_demo_and_the_daemon(tiny_model, tmp_path, sig):
    # The demo's temporary folders, the daemon's socket among them: the daemon is found by this path (short: a
    # socket's path has at most 107 bytes).
    private = Path(tempfile.mkdtemp(prefix="k3sig-"))
    (tmp_path / "one.c").write_text(ONE_UNIT)
    proc = start(["demo", "one.c", "--model", str(tiny_model), "--trust-remote-code"], tmp_path, TMPDIR=str(private))
    out = Lines(proc)
    assert out.wait_for("k3-backend listening on"), out.lines  # the daemon is bound and loading
    err = ended_by(sig, proc, lambda: None)
    assert_ended_by(sig, proc, err, "k3-backend demo")
    assert daemons_under(private) == []
    shutil.rmtree(private, ignore_errors=True)


def test_the_demo_says_what_each_phase_does(tmp_path):
    """The README's first command on a fresh machine (no tiny checkpoint yet), on one small unit: a line for each
    phase before it starts, and one note on the cut-short audits the random weights make."""
    (tmp_path / "one.c").write_text(ONE_UNIT)
    env = {"XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", "demo", "one.c", "--max-tokens", "8"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=os.environ | {"K3LSP_CACHE_DIR": str(tmp_path / "cache")} | env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    phases = [
        "building the tiny kimi_k3 checkpoint",
        "starting k3-backend serve",
        "k3-backend listening on",
        "k3-backend loading the model: reading",
        "k3-backend loading the model: the tokenizer",
        "k3-backend compiling the kernels",
        "the daemon is ready",
        "auditing one.c",
        'units "cut short (length)" are expected',
        "the daemon's status:",
        "stopped the daemon",
    ]
    lines = done.stdout.splitlines()
    at = [next((i for i, line in enumerate(lines) if phase in line), None) for phase in phases]
    assert None not in at and at == sorted(at), done.stdout  # each phase said, in order
    assert done.stdout.count("are expected") == 1


def private_dir() -> Path:
    """A short folder only this user may enter: for a daemon's ipc socket (at most 107 bytes of path)."""
    return Path(tempfile.mkdtemp(prefix="k3sig-"))


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("when", ["k3-backend listening on", "k3-backend ready on"])
def test_a_signal_stops_serve_with_one_line_and_status_0(tiny_model, tmp_path, sig, when):
    """A daemon's stop is no interruption: exit 0, whether it was serving or still loading its model."""
    private = private_dir()
    args = ["serve", "--model", str(tiny_model), "--trust-remote-code", "--bind", f"ipc://{private}/d.sock"]
    proc = start([*args, "--no-store", "--load-pace", "0.2"], tmp_path)  # paced: it is loading for a second
    out = Lines(proc)
    assert out.wait_for(when), (out.lines, proc.stderr.read() if proc.poll() is not None else "")
    err = ended_by(sig, proc, lambda: None)
    shutil.rmtree(private, ignore_errors=True)
    assert "Traceback" not in err and proc.returncode == 0, err
    assert [line for line in err.splitlines() if "stopped" in line], err


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_stops_supervise_and_its_pair_with_status_0(tmp_path, sig):
    pair = "import time; print('k3-backend ready on ipc:///nowhere', flush=True); time.sleep(120)"
    proc = start(["supervise", "--", sys.executable, "-c", pair], tmp_path)
    out = Lines(proc)
    assert out.wait_for("k3-backend ready on"), out.lines
    err = ended_by(sig, proc, lambda: None)
    assert "Traceback" not in err and proc.returncode == 0, err
    assert f"{signal.Signals(sig).name}: stopping the pair" in err


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_doctor_checks_ends_it_and_removes_its_checkpoint(tmp_path, sig):
    temp = tmp_path / "t"  # doctor builds the tiny checkpoint in a k3-doctor-* folder here: then it is at work
    temp.mkdir()
    proc = start(["doctor"], tmp_path, TMPDIR=str(temp))
    deadline = time.monotonic() + WAIT
    while not list(temp.glob("k3-doctor-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(temp.glob("k3-doctor-*")), proc.communicate(timeout=WAIT)
    err = ended_by(sig, proc, lambda: None)
    assert_ended_by(sig, proc, err, "k3-backend doctor")
    assert not list(temp.glob("k3-doctor-*"))  # its temporary checkpoint went on the way out


def mlx_loaded(proc: subprocess.Popen) -> bool:
    """Wait (bounded) until the process has mlx mapped (Linux: /proc/PID/maps): make-tiny is building the model."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + WAIT
    while proc.poll() is None and time.monotonic() < deadline:
        if "libmlx" in maps.read_text():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="sees mlx loaded in /proc")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_make_tiny_builds_ends_it_leaving_no_checkpoint(tmp_path, sig):
    proc = start(["make-tiny", "tiny"], tmp_path)
    with reaped(proc):
        assert mlx_loaded(proc), proc.communicate(timeout=WAIT)
        assert proc.poll() is None, "make-tiny ended before the signal"
        err = ended_by(sig, proc, lambda: None)
    assert_ended_by(sig, proc, err, "k3-backend make-tiny")
    # Nothing a demo would take for a whole checkpoint: no config.json, or all of it. (A signal that lands while a
    # library is imported can be swallowed by the library: then the build ends whole before the status says so.)
    out = tmp_path / "tiny"
    assert not (out / "config.json").exists() or (out / "tokenizer.json").exists(), sorted(out.iterdir())


def fidelity_record(tiny_model: Path, tmp_path: Path, files: int = 10) -> list[str]:
    """`fidelity record` of the tiny checkpoint on a corpus of ``files`` files: it says each window it runs."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(files):
        (corpus / f"f{n}.c").write_text(ONE_UNIT * 40)
    model = ["--model", str(tiny_model), "--trust-remote-code"]
    return ["fidelity", "record", *model, "--corpus", str(corpus), "-o", str(tmp_path / "base")]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_mid_fidelity_record_ends_it(tiny_model, tmp_path, sig):
    proc = start(fidelity_record(tiny_model, tmp_path), tmp_path)
    said: list[str] = []
    deadline = time.monotonic() + WAIT
    while not any(line.startswith("[1/") for line in said) and time.monotonic() < deadline:
        line = proc.stderr.readline()  # "[1/10] ...": the first window is running
        if not line:
            break
        said.append(line)
    assert any(line.startswith("[1/") for line in said), said
    err = "".join(said) + ended_by(sig, proc, lambda: None)
    assert_ended_by(sig, proc, err, "k3-backend fidelity")


@pytest.fixture(scope="module")
def base(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BASE of the tiny checkpoint on one corpus file, recorded once for the compare test."""
    tmp = tmp_path_factory.mktemp("base")
    args = [sys.executable, "-m", "backend.cli", *fidelity_record(tiny_model, tmp, files=1)]
    done = subprocess.run(args, cwd=tmp, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return tmp / "base"


def fidelity_compare(tiny_model: Path, base: Path) -> list[str]:
    return ["fidelity", "compare", "--model", str(tiny_model), "--trust-remote-code", "--base", str(base)]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="sees mlx loaded in /proc")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_fidelity_compare_runs_ends_it(tiny_model, base, tmp_path, sig):
    proc = start(fidelity_compare(tiny_model, base), tmp_path)
    with reaped(proc):
        assert mlx_loaded(proc), proc.communicate(timeout=WAIT)
        assert proc.poll() is None, "compare ended before the signal"
        err = ended_by(sig, proc, lambda: None)
    assert_ended_by(sig, proc, err, "k3-backend fidelity")


# --- a closed stdout -----------------------------------------------------------------------------------------


def assert_quiet_on_closed_stdout(args: list[str], tmp_path: Path) -> None:
    """Run the command with nobody reading its stdout: it ends at its first write, quietly, with 141."""
    with reaped(start(args, tmp_path, closed_stdout=True)) as proc:
        err = proc.communicate(timeout=600)[1]
    assert_quiet(proc, err)


@pytest.mark.parametrize(
    "args", [["make-tiny", "tiny"], ["doctor"], ["keys", "init", "--dir", "keys"]], ids=lambda a: a[0]
)
def test_a_closed_stdout_ends_the_command_quietly(tmp_path, args):
    assert_quiet_on_closed_stdout(args, tmp_path)


def test_a_closed_stdout_ends_the_demo_quietly(tmp_path):
    (tmp_path / "one.c").write_text(ONE_UNIT)
    with holding({"one": []}) as daemon:
        assert_quiet_on_closed_stdout(["demo", "one.c", "--endpoint", daemon.endpoint], tmp_path)


def test_a_closed_stdout_ends_fidelity_record_quietly(tiny_model, tmp_path):
    """Its one line on stdout is its last ("wrote BASE"): one file is enough to reach it (ten took 26 s)."""
    assert_quiet_on_closed_stdout(fidelity_record(tiny_model, tmp_path, files=1), tmp_path)


def test_a_closed_stdout_ends_serve_quietly(tiny_model, tmp_path):
    """Its lines are its launcher's (the demo, supervise, a shell): once nobody reads them, serve ends at the next
    one, before it serves anything (the ready line is its last), as every command does; it raised BrokenPipeError
    with a traceback and exit 1."""
    private = private_dir()
    args = ["serve", "--model", str(tiny_model), "--trust-remote-code", "--bind", f"ipc://{private}/d.sock"]
    try:
        assert_quiet_on_closed_stdout([*args, "--no-store"], tmp_path)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_closed_stdout_stops_supervise_and_its_pair_quietly(tmp_path):
    """Its stdout is the pair's: once nobody reads it, supervise stops the pair as a signal does and ends with
    141 (its reader thread died with a traceback, and the pair ran on unread)."""
    pair = "import time; print('k3-backend ready on ipc:///nowhere', flush=True); time.sleep(120)"
    started = time.monotonic()
    assert_quiet_on_closed_stdout(["supervise", "--", sys.executable, "-c", pair], tmp_path)
    assert time.monotonic() - started < WAIT / 2  # the pair was stopped, not waited for


def test_a_closed_stdout_ends_fidelity_compare_quietly(tiny_model, base, tmp_path):
    """Its tables are its one write to stdout, at the end."""
    assert_quiet_on_closed_stdout(fidelity_compare(tiny_model, base), tmp_path)
