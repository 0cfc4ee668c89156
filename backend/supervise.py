"""`k3-backend supervise -- <command>`: keep the pair (or one daemon) running, and stop trying when it cannot run.

`mlx.launch` exits 0 whatever its ranks return, so neither launchd's "restart on failure" nor its exit code
says how the pair ended. The supervisor learns each rank's real exit code from the rank itself
(backend/exitstatus.py: it passes K3_EXIT_STATUS_DIR with `mlx.launch --env`, so every host's rank gets it).
A command that is not `mlx.launch` (one Mac, `k3-backend serve`) is its own rank 0: its own exit status counts
when it wrote none (killed by a signal). Nothing the command prints counts: `mlx.launch`'s own line "Node with
rank N exited with code C" shares its stream with the ranks' output, where the daemon logs what clients send
and the model writes, so anyone could print it. A rank that wrote nothing (killed, or on another Mac) has no
code; the launcher's lines are kept in the log tail for a person to read.

A run that ends with rank 0 and every other rank that wrote a code at 0 was stopped on purpose (rank 0
decides a stop and, on a pair, stops the others first): the supervisor ends too, with 0. Any other end
is a failure, described by its kind (`Run.kind`): whether the pair had printed its ready line ("at start" or
"while serving") and the codes the ranks ended with on their own. The pair is started again after a backoff
that doubles from --backoff up to --backoff-max; a run that served for --healthy-after seconds resets the
backoff and the count. After --max-failures failures of the same kind in a row the supervisor gives up, exits
1 and says why, with the last lines of the pair's log: restarting a pair that fails the same way every time
only hides the reason.

The launcher runs in a session of its own with its standard input a pipe that stays open (with stdin at EOF
its input loop spins, see hostfiles/README.md). SIGTERM or SIGINT stops the pair (SIGTERM to the launcher's
process group, SIGKILL after --stop-timeout) and then the supervisor, with exit code 0; a stdout nobody reads any
more (the pair's lines go nowhere) stops them the same way, with 141, as every command ends at a closed stdout.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from backend import exitstatus
from backend.exitstatus import RANK_FAILURE_EXIT
from backend.launch import READY
from k3lsp.wire import ending

COLLATERAL = {RANK_FAILURE_EXIT, -signal.SIGTERM}
TAIL_LINES = 20


@dataclass
class Run:
    """How one start of the command ended."""

    codes: dict[int, int] = field(default_factory=dict)  # rank -> exit code, from the status files
    launcher: int | None = None  # the command's own exit code (mlx.launch: 0 whatever the ranks did)
    served: float | None = None  # seconds between the ready line and the end; None: never ready
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))

    def clean(self) -> bool:
        """Rank 0 and every rank that wrote a code exited 0: the pair was stopped on purpose."""
        return self.codes.get(0) == 0 and all(code == 0 for code in self.codes.values())

    def kind(self) -> str:
        """What failed, in words that are equal for two failures of the same kind: the phase and the ranks' own
        codes, without which rank and without the ends the first failure caused (a rank told that its peer
        failed exits RANK_FAILURE_EXIT, the launcher SIGTERMs the others): which rank fails first is a race."""
        phase = "at start" if self.served is None else "while serving"
        own = {_code(code) for code in self.codes.values() if code not in COLLATERAL}
        if not own:
            own = {_code(code) for code in self.codes.values()}
        return f"{phase}: {', '.join(sorted(own)) or f'no rank reported an exit code, the launcher {self.launcher}'}"

    def describe(self) -> str:
        """Every rank's code: "rank 0 exit 3, rank 1 killed by SIGKILL"."""
        return ", ".join(f"rank {rank} {_code(code)}" for rank, code in sorted(self.codes.items())) or "no rank codes"


def _code(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-failures",
        type=int,
        default=5,
        help="give up after this many failures of the same kind in a row (default %(default)s)",
    )
    p.add_argument(
        "--backoff",
        type=float,
        default=5.0,
        help="seconds before the first restart, doubled after each failure (default %(default)s)",
    )
    p.add_argument(
        "--backoff-max", type=float, default=300.0, help="longest pause between restarts (default %(default)s)"
    )
    p.add_argument(
        "--healthy-after",
        type=float,
        default=600.0,
        help="a run that served this many seconds resets the backoff and the failure count (default %(default)s)",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=60.0,
        help="seconds the pair has to stop on SIGTERM before it is killed (default %(default)s)",
    )
    p.add_argument(
        "--write-launchd",
        type=Path,
        metavar="DIR",
        help="write launchd property lists for this command to DIR instead of running it (hostfiles/README.md)",
    )
    p.add_argument(
        "--wired-limit-mb", type=int, help="with --write-launchd: the iogpu.wired_limit_mb a boot job sets on each Mac"
    )
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- then the command: mlx.launch ... -- k3-backend serve ..."
    )


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print(
            "k3-backend supervise: give the command after --, e.g. -- mlx.launch --hostfile H -- k3-backend serve ...",
            file=sys.stderr,
        )
        return 2
    if args.max_failures < 1 or min(args.backoff, args.backoff_max, args.stop_timeout) <= 0 or args.healthy_after < 0:
        print(
            "k3-backend supervise: --max-failures must be >= 1, --backoff, --backoff-max and --stop-timeout > 0",
            file=sys.stderr,
        )
        return 2
    if args.write_launchd is not None:
        from backend import launchd

        for path in launchd.write(args.write_launchd, command, args.wired_limit_mb):
            print(path)
        return 0
    return Supervisor(command, args).loop()


class Supervisor:
    def __init__(self, command: list[str], args: argparse.Namespace):
        self.command = command
        self.args = args
        self.stopping = threading.Event()
        self.stdout_closed = False  # nobody reads the pair's lines: stop it, end with 141 (docs/cli.md)
        self.child: subprocess.Popen | None = None

    def loop(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        backoff, streak, last_kind = self.args.backoff, 0, None
        while not self.stopping.is_set():
            run = self.start_once()
            if self.stopping.is_set():
                break
            if run.clean():
                say("the pair exited cleanly (every rank 0): not restarting it")
                return 0
            kind = run.kind()
            if run.served is not None and run.served >= self.args.healthy_after:
                backoff, streak = self.args.backoff, 0
            streak = streak + 1 if kind == last_kind else 1
            last_kind = kind
            if streak >= self.args.max_failures:
                say(
                    f"giving up after {streak} failures in a row of the same kind ({kind}; the last: "
                    f"{run.describe()}). Run `k3-backend doctor` under the same launch command. The pair's last log "
                    "lines:\n" + "".join(run.tail).rstrip()
                )
                return 1
            say(f"the pair failed ({kind}; {run.describe()}; {streak} in a row); restarting in {backoff:g} s")
            if self.stopping.wait(backoff):
                break
            backoff = min(backoff * 2, self.args.backoff_max)
        say("stopped")
        return ending.EXIT_CLOSED_PIPE if self.stdout_closed else 0

    def start_once(self) -> Run:
        """Run the command once, passing its output through; how it ended."""
        run = Run()
        with tempfile.TemporaryDirectory(prefix="k3-exit-") as status_dir:
            self.child = subprocess.Popen(
                _with_status_dir(self.command, status_dir),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=os.environ | {exitstatus.ENV: status_dir},
            )
            ready: list[float] = []
            readers = [
                threading.Thread(
                    target=_pass_stdout, args=(self.child.stdout, ready, run.tail, self._closed), daemon=True
                ),
                threading.Thread(target=_pass_stderr, args=(self.child.stderr, run), daemon=True),
            ]
            for reader in readers:
                reader.start()
            if self.stopping.is_set():  # a signal arrived while starting
                self._stop_child()
            run.launcher = self.child.wait()
            self._end_group(self.child.pid, self.args.stop_timeout)  # ranks the launcher left behind
            for reader in readers:
                reader.join(10)
            run.served = time.monotonic() - ready[0] if ready else None
            run.codes.update(exitstatus.read(Path(status_dir)))
        if not _is_launcher(self.command):
            run.codes.setdefault(0, run.launcher)
        self.child.stdin.close()
        self.child = None
        return run

    def _stop(self, signum: int, _frame) -> None:
        self._stop_pair(f"{signal.Signals(signum).name}: stopping the pair")

    def _closed(self) -> None:
        self.stdout_closed = True
        self._stop_pair("stdout closed: stopping the pair")

    def _stop_pair(self, why: str) -> None:
        self.stopping.set()
        say(why)
        threading.Thread(target=self._stop_child, daemon=True).start()

    def _stop_child(self) -> None:
        """SIGTERM the launcher's process group (the launcher and the ranks on this host: rank 0 stops the pair)."""
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)

    @staticmethod
    def _end_group(pgid: int, timeout: float) -> None:
        """Wait (bounded) until no process of the group is left, then SIGKILL what is: a restart must not find
        the previous pair's ranks still holding the model's memory or the ring's ports."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return
            time.sleep(0.1)
        say(f"the pair did not stop within {timeout:g} s: killing what is left of it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. On Linux a zombie does not count (an orphaned rank may wait
    for a reaper that is slow or absent in a container); elsewhere launchd reaps orphans at once."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
                return True
    return False


LAUNCHERS = ("mlx.launch", "k3-launch")  # k3-launch: mlx.launch without its busy loops (backend/launcher.py)


def _is_launcher(command: list[str]) -> bool:
    return Path(command[0]).name in LAUNCHERS


def _with_status_dir(command: list[str], status_dir: str) -> list[str]:
    """`mlx.launch` exports the directory on every host (--env); any other command inherits it."""
    if _is_launcher(command):
        return [command[0], "--env", f"{exitstatus.ENV}={status_dir}", *command[1:]]
    return command


def _pass_stdout(stream: IO[bytes], ready: list[float], tail: collections.deque, closed: Callable[[], None]) -> None:
    """Pass the command's stdout through and keep its last lines; once nobody reads ours, say ``closed`` once and
    go on reading the command's (it must not block on a full pipe while it stops)."""
    out: IO[bytes] | None = sys.stdout.buffer
    for raw in stream:
        try:
            if out is not None:
                out.write(raw)
                out.flush()
        except BrokenPipeError:
            out = None
            closed()
        line = raw.decode(errors="replace")
        tail.append(line)
        if line.startswith(READY) and not ready:
            ready.append(time.monotonic())


def _pass_stderr(stream: IO[bytes], run: Run) -> None:
    """Pass the command's stderr through and keep its last lines; no exit code is read from it (see the module doc)."""
    for raw in stream:
        sys.stderr.buffer.write(raw)
        sys.stderr.buffer.flush()
        run.tail.append(raw.decode(errors="replace"))


def say(message: str) -> None:
    print(f"k3-backend supervise: {message}", file=sys.stderr, flush=True)
