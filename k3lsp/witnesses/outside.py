"""Alerts that name a place outside the workspace: left out, and counted.

An analyzer confined to the workspace (``k3lsp.witnesses.confine``) cannot read a file outside it, but it
still says what it tried: ``unable to open '/home/me/.ssh/id_rsa'``, an alert located in the analyzed file
whose message is a path the repository chose. Such a path tells the model nothing about the code and tells
whoever reads the prompt or a shared result about the user's machine, so an alert whose message names a path
that resolves (symlinks followed) outside the workspace, the run's private directory and the system's include
directories is not kept; the witness's run counts it (``Ran.outside``) and the status says how many.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from k3lsp.witnesses.flags import SYSTEM_DIRS

# A word with a slash in it, as a tool quotes a path: between quotes, brackets or spaces; ``file:line`` ends it.
_PATHLIKE = re.compile(r"""(?<![^\s'"`(\[<{])[^\s'"`()\[\]<>{},;:]*/[^\s'"`()\[\]<>{},;:]*""")


def _places(message: str) -> list[str]:
    return [m for m in _PATHLIKE.findall(message) if re.search(r"[\w.~-]", m)]


def names_outside(message: str, folder: Path, inside: Sequence[Path]) -> bool:
    """Whether ``message`` names a path outside every folder of ``inside`` (and the system's include
    directories); a relative path is read from ``folder``, where the analyzed copy is, ``~`` is outside."""
    for place in _places(message):
        if place.startswith("~"):
            return True
        try:
            path = (folder / place).resolve()
        except (OSError, RuntimeError, ValueError):
            return True
        if not any(path == d or path.is_relative_to(d) for d in (*inside, *SYSTEM_DIRS)):
            return True
    return False
