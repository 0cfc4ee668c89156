"""A command that ``ending.run`` ends on a signal exits with 128 + the signal, wherever the signal lands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from k3lsp.wire import isolated

ROOT = Path(__file__).resolve().parents[2]

# A SIGTERM that lands in code run by exec of a string, as it does in a dataclass's methods while one is imported.
INTERRUPTED_IN_EXEC = """
import os, signal, sys
from k3lsp.wire import ending

def command():
    exec("os.kill(os.getpid(), signal.SIGTERM)\\nfor _ in range(1000): pass", {"os": os, "signal": signal})
    return 0

sys.exit(ending.run("interrupted", command))
"""


def ended(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """``source`` run as the module ``interrupted`` (bounded: the commands here sleep for longer when a signal is
    lost)."""
    (tmp_path / "interrupted.py").write_text(source)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "interrupted"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=20)  # fmt: skip


# A SIGINT that lands in code which swallows every exception, as nanobind does while mlx.core's module initialises
# (`import mlx.core`): the KeyboardInterrupt was lost and the command ran on to exit 0. k3-backend imports mlx.core
# under ending.deferred, so the signal is raised once the import is done.
SWALLOWED = """
import os, signal, sys, time
from k3lsp.wire import ending

def command():
    with ending.deferred():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        except BaseException:
            pass
    time.sleep(30)  # the work after the import, which the signal must stop
    return 0

sys.exit(ending.run("interrupted", command))
"""


# A SIGINT that lands while a class is made whose attribute has a __set_name__ (a functools.cached_property, as
# importing ipaddress makes one under shtab's import): CPython wraps the KeyboardInterrupt in a RuntimeError ("Error
# calling __set_name__"), which ended the command with a traceback.
INTERRUPTED_IN_SET_NAME = """
import os, signal, sys
from k3lsp.wire import ending

class Interrupting:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000): pass

def command():
    type("Made", (), {"attribute": Interrupting()})
    return 0

sys.exit(ending.run("interrupted", command))
"""


@pytest.mark.parametrize(
    ("source", "sig"),
    [(INTERRUPTED_IN_EXEC, signal.SIGTERM), (SWALLOWED, signal.SIGINT), (INTERRUPTED_IN_SET_NAME, signal.SIGINT)],
    ids=["inside-exec", "where-exceptions-are-swallowed", "while-a-class-is-made"],
)
def test_a_signal_wherever_it_lands_ends_the_command_with_one_line_and_128_plus_the_signal(tmp_path, source, sig):
    done = ended(tmp_path, source)
    assert done.returncode == 128 + sig, done.stderr
    assert done.stderr.splitlines() == [f"interrupted: interrupted by {signal.Signals(sig).name}"]


def test_a_sigint_while_an_isolated_child_imports_its_command_ends_it_with_one_line_and_130(tmp_path, monkeypatch):
    """A child started by ``isolated.python_command`` (the demo's ``k3lsp status``, the daemon, the index's
    children) and interrupted before its command reached ``ending.run``, while its modules import: Ctrl-C in the
    demo printed that child's KeyboardInterrupt traceback."""
    (tmp_path / "slow_command.py").write_text("import slow_dependency\n")
    (tmp_path / "slow_dependency.py").write_text("import time\nprint('importing', flush=True)\ntime.sleep(30)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the child imports from where this process does
    command = isolated.python_command("slow_command")
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "importing\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.splitlines() == ["slow_command: interrupted by SIGINT"]
