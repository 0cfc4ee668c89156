"""How every command of both programs ends on SIGINT, SIGTERM and a closed stdout (docs/cli.md).

A person who presses Ctrl-C, a CI job that is cancelled (SIGTERM) and a pipe into ``head`` are ordinary ends of a
command, not faults: none of them may print a Python traceback. So every ``main`` runs its command through
:func:`run`:

- SIGINT raises KeyboardInterrupt (Python's own) and SIGTERM does what SIGINT does, remembered as SIGTERM: under
  ``asyncio.run`` both cancel the main task first, as Python does for SIGINT, so nothing is raised in the middle
  of a callback. Either ends the command with one line on stderr (``k3lsp status: interrupted by SIGINT``) and
  exit status 128 + the signal's number (130, 143), as a shell reports a command a signal killed. ``finally``
  blocks run on the way, so a daemon the command started is stopped and temporary files go. Code that catches
  KeyboardInterrupt itself and returns (pygls ends the language server so) runs under :func:`remembered`.
- A command with work worth keeping (``audit``, ``review``, ``eval``) catches the signal itself with
  :class:`Stop` while its event loop runs: it ends its requests, writes its report of what was done, says in
  one line what was kept and how to go on, and returns :meth:`Stop.exit_status`.
- A closed stdout (``k3lsp status --json | head -1``) ends the command quietly, with the status 141 a shell
  gives a command SIGPIPE killed: Python ignores SIGPIPE, so the write raises BrokenPipeError instead.

A command that waits for a child process passes the signal on with :func:`wait_child` and lets it end as it
documents (the demo's ``k3lsp audit`` writes its report) before it ends itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # 141
CHILD_GRACE = 30.0  # seconds a child that was passed the signal has to end before it is killed


def exit_status(signum: int) -> int:
    """128 + the signal's number: the status a shell shows for a command that a signal ended."""
    return 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def run(prog: str, command: Callable[[], int]) -> int:
    """``command()``'s exit status; a signal or a closed stdout ends it as the module docstring says."""
    before = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        status = command()
        if not _received:
            sys.stdout.flush()  # here, not at exit, where a closed pipe would print "Exception ignored"
            return status
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        return _closed_pipe()
    except RuntimeError as exc:
        # CPython wraps a KeyboardInterrupt raised in a __set_name__ (a signal while a class with a
        # functools.cached_property is made, as importing ipaddress does) in "Error calling __set_name__"
        if not isinstance(exc.__cause__, KeyboardInterrupt):
            raise
    finally:
        signal.signal(signal.SIGTERM, before)
    _forget_unhandled_interrupt()
    signum = interrupting()
    say(f"{prog}: interrupted by {signal_name(signum)}")
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    return exit_status(signum)


def _forget_unhandled_interrupt() -> None:
    """Keep the exit status this module chose. CPython marks a KeyboardInterrupt that leaves code run by
    ``exec`` of a string as unhandled even when it is caught further up (dataclasses and namedtuples make their
    methods so, so a signal during an import lands there), and under ``python -m`` ends the process with SIGINT at
    exit whatever status it returns. Every ``exec`` of a string clears that mark before it runs."""
    exec("None")  # a constant: what matters is the clearing exec does first


_received: list[int] = []  # signals that came while a command ran (SIGINT only under `remembered`), first first


def _on_sigterm(signum: int, frame: object) -> None:
    """What SIGINT does now (asyncio.run's handler cancels its main task; Python's raises KeyboardInterrupt)."""
    _received.append(signum)
    on_sigint = signal.getsignal(signal.SIGINT)
    if not callable(on_sigint) or on_sigint is _interrupt:
        raise KeyboardInterrupt
    on_sigint(signal.SIGINT, frame)


def _interrupt(signum: int, frame: object) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def remembered() -> Iterator[None]:
    """For code that catches KeyboardInterrupt and returns (pygls' server loop): SIGINT and SIGTERM raise it and
    are remembered, so :func:`run` still ends the command as interrupted when the code returns."""
    before = {sig: signal.signal(sig, _interrupt) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """For code that swallows whatever is raised inside it (nanobind runs the initialisation of mlx.core's module
    so: a KeyboardInterrupt raised there was lost, and the command ran on to exit 0): SIGINT and SIGTERM are only
    noted during the block, and the first is raised again once it is done, to the handlers of before."""
    pending: list[int] = []
    before = {sig: signal.signal(sig, lambda signum, _frame: pending.append(signum)) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])


def interrupting() -> int:
    """The signal behind the KeyboardInterrupt being handled: the first one remembered, else SIGINT (Python's own
    handler raised it)."""
    return _received[0] if _received else signal.SIGINT


def say(line: str) -> None:
    """One line on stderr, even when stderr is a closed pipe too (then nothing)."""
    with contextlib.suppress(BrokenPipeError, OSError):
        print(line, file=sys.stderr, flush=True)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe nobody reads any more (the BrokenPipeError was about stdout, not a child's pipe
    or a socket)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


class ProtocolStdout(io.BufferedWriter):
    """The stdout of a program that answers a peer on it (the language server for its editor, ``k3lsp mcp`` for
    its agent) or tells its launcher how far it is (``k3-backend serve``), on file descriptor ``fd``: once nobody
    reads it, nobody is left to tell, so the process ends at the write that finds no reader, as SIGPIPE ends a C
    server (clangd), with EXIT_CLOSED_PIPE and no traceback (pygls would log one per message until stdin closed;
    the MCP SDK's writer failed and its reader went on waiting for the open stdin; serve ended with a traceback
    and 1). Files, threads and daemons need no goodbye: each audited unit is cached as it finishes. The
    descriptor stays open when this object goes."""

    def __init__(self, fd: int):
        super().__init__(io.FileIO(fd, "wb", closefd=False))

    def write(self, data) -> int:
        try:
            return super().write(data)
        except BrokenPipeError:
            _end_at_closed_pipe()

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            _end_at_closed_pipe()


@contextlib.contextmanager
def answering_on_stdout() -> Iterator[None]:
    """For a library that answers its peer through ``sys.stdout`` (the MCP SDK's stdio server): for the block,
    ``sys.stdout`` writes to the peer through a :class:`ProtocolStdout`, and file descriptor 1 goes to stderr, so
    that a child's output or a stray print never lands inside the protocol."""
    sys.stdout.flush()
    wire = os.dup(1)  # not inherited by children
    os.dup2(2, 1)
    before, sys.stdout = sys.stdout, io.TextIOWrapper(ProtocolStdout(wire), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdout = before
        os.dup2(wire, 1)
        os.close(wire)


def _end_at_closed_pipe() -> NoReturn:
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(EXIT_CLOSED_PIPE)


def raise_broken_pipe() -> None:
    """For ``rich.console.Console.on_broken_pipe`` (set on the instance): rich exits 1 on a closed stdout by
    itself; so the command ends as every command does, with 141."""
    raise BrokenPipeError


def _closed_pipe() -> int:
    """Point stdout at /dev/null, so that nothing written later (and the flush at exit) fails again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


class Stop:
    """SIGINT or SIGTERM caught while an event loop runs, for a command that ends its work itself and keeps what
    it did: ``event`` is set, ``signum`` says which came first."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signum: int | None = None

    @contextlib.contextmanager
    def catching(self) -> Iterator[Stop]:
        """Inside a running loop: the signals set ``event`` instead of raising; the handlers before are put back
        after (so a signal while the report is written still ends the command as :func:`run` says)."""
        loop = asyncio.get_running_loop()
        before = {sig: signal.getsignal(sig) for sig in SIGNALS}
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._caught, sig)
        try:
            yield self
        finally:
            for sig, handler in before.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)

    def _caught(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()

    @property
    def name(self) -> str:
        return signal_name(self.signum) if self.signum is not None else "a stop"

    def exit_status(self, otherwise: int) -> int:
        """128 + the signal when one came, else ``otherwise`` (the command's own status)."""
        return otherwise if self.signum is None else exit_status(self.signum)


def wait_child(proc: subprocess.Popen, grace: float = CHILD_GRACE) -> int:
    """``proc``'s exit status. Interrupted meanwhile, the child gets the signal too (a terminal sends SIGINT to
    both; SIGTERM came to this process alone) and ``grace`` seconds to end as it documents, then SIGKILL; the
    interruption is raised again after."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(interrupting())
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
