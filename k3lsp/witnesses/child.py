"""One analyzer run as a child process: bounded in time and memory, in a private directory, with a clean environment.

An analyzer reads a file the user did not write (a repository they cloned) and may blow up on it: a clang
analyzer path explosion, GCC's analyzer on a large function, cppcheck on a macro maze. So each run has a
wall-time bound (the whole process group is killed when it passes), and the child itself is limited before
it starts the tool: address space (``RLIMIT_AS``), CPU seconds, the size of any file it writes, no core dumps.
The limits are set by a tiny Python launcher that then ``exec``\\ s the tool (``preexec_fn`` is not safe in a
threaded parent, and the server runs these in threads); the same launcher confines what it may read to the
workspace and the system (``k3lsp.witnesses.confine``). The child's working directory is a fresh private
temporary directory (0700), where every output it writes goes; its environment is the minimum (``PATH``,
``LANG``, ``HOME`` set to that directory): nothing like ``CPATH``, ``GCC_EXEC_PREFIX``, ``COMPILER_PATH`` or
``LD_PRELOAD`` from the editor's environment changes what the tool loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from k3lsp.witnesses import confine

DEFAULT_SECONDS = 30.0
DEFAULT_MEMORY = 2 * 1024**3  # bytes of address space
MAX_OUTPUT_FILE = 64 * 1024**2  # bytes any file the tool writes may reach
MAX_CAPTURE = 8 * 1024**2  # bytes of stdout/stderr kept

LAUNCHER = Path(__file__).with_name("confine.py")  # runs in the child: limits, confinement, then exec


@dataclass(frozen=True)
class Limits:
    seconds: float = DEFAULT_SECONDS
    memory: int = DEFAULT_MEMORY


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its exit code (None when it was killed at the time bound), and what it printed."""

    code: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.code is None


def environment(home: str) -> dict[str, str]:
    """The child's whole environment."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C", "HOME": home, "TMPDIR": home}


def run(argv: list[str], workdir: str, limits: Limits, readable: Sequence[Path] | None = None) -> Outcome:
    """Run ``argv`` (``argv[0]`` an absolute path) in ``workdir`` within ``limits``; never raises for the tool's
    own failure (a crash, a time-out, a limit hit: the outcome says so).

    With ``readable`` (the workspace, or nothing for a file outside every workspace) the tool sees only those
    folders, the system's and its own installation, and writes only ``workdir`` (``confine``): every run
    over a repository's text. Without it (None) it runs unconfined: only for ``--version``, which reads no
    input."""
    cpu = max(1, int(limits.seconds) + 1)
    grants = None if readable is None else confine.grants(workdir, readable, argv[0])
    spec = json.dumps({"limits": [limits.memory, cpu, MAX_OUTPUT_FILE], "grants": grants})
    launcher = [sys.executable, "-I", "-S", str(LAUNCHER), spec, *argv]
    proc = subprocess.Popen(
        launcher,
        cwd=workdir,
        env=environment(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a time-out kills every process it started
    )
    try:
        out, err = proc.communicate(timeout=limits.seconds)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return Outcome(code, _text(out), _text(err))


def _text(data: bytes) -> str:
    return data[:MAX_CAPTURE].decode("utf-8", errors="replace")
