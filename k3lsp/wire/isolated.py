"""Python child processes that import the project's own code, never the current directory's.

`python -m pkg` puts the current directory first on ``sys.path``. The language server runs in the
workspace (editors start it there), `k3lsp audit` in the repository being audited, so a child started
that way inside a repository holding a ``k3lsp/`` or ``backend/`` package would run the repository's
code. Children therefore run with ``-I`` (no current directory or script directory on the path, no
``PYTHON*`` variables, no user site) and get the parent's own absolute import path appended to theirs,
minus the current directory: they import what the parent imports, from where the parent imports it.
"""

from __future__ import annotations

import json
import os
import sys

# Runs in the child: extend the isolated path with the parent's, then run the module as `-m` would. A SIGINT
# before the module's command reaches `ending.run` (while its modules import) ends the child as `ending.run`
# would, with one line and 130, not a traceback; `exec('None')` first, as `ending._forget_unhandled_interrupt`.
_BOOT = """
import sys
module = sys.argv[2]
try:
    import json, runpy
    sys.path += [p for p in json.loads(sys.argv[1]) if p not in sys.path]
    sys.argv = sys.argv[2:]
    runpy.run_module(module, run_name='__main__', alter_sys=True)
except KeyboardInterrupt:
    exec('None')
    sys.stderr.write(module + ': interrupted by SIGINT\\n')
    sys.exit(130)
"""


def import_path() -> list[str]:
    """This process's import path without relative entries and without the current directory."""
    cwd = os.path.realpath(os.getcwd())
    return [p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) != cwd]


def python_command(module: str, *args: str, unbuffered: bool = False) -> list[str]:
    """The command line of ``python -m module args`` that imports nothing from the current directory.

    ``unbuffered`` stands in for PYTHONUNBUFFERED, which ``-I`` ignores.
    """
    flags = ["-I", "-u"] if unbuffered else ["-I"]
    return [sys.executable, *flags, "-c", _BOOT, json.dumps(import_path()), module, *args]
