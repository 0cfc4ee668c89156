"""The parsers of a command and what their help says of each option, and the command run as a process: for the
tests that every flag is described, every default shown, and the version and completion printed (k3lsp and
k3-backend)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

from k3lsp.wire.commandline import says_nothing


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m MODULE *args`` (a command as the user runs it), bounded."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


def every(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and its subparsers, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                yield from every(sub)


def shown_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An option's help as ``--help`` prints it (placeholders filled, whitespace as one space)."""
    return " ".join(parser._get_formatter()._expand_help(action).split())


def problems(parser: argparse.ArgumentParser) -> list[str]:
    """Each option of the command without help, or whose help does not show its default."""
    found = []
    for p in every(parser):
        p.format_help()  # a stray % in a help string fails here, not at a user's terminal
        for action in p._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            name = f"{p.prog} {action.option_strings[-1]}"
            if not action.help:
                found.append(f"{name}: no help")
            elif not says_nothing(action.default) and "default" not in shown_help(p, action).lower():
                found.append(f"{name}: help does not show its default {action.default!r}")
    return found
