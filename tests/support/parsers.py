"""The parsers of a command and what their help says of each option, and the command run as a process: for the
tests that every flag is described, every default shown, and the version and completion printed (k3lsp and
k3-backend)."""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
from collections.abc import Iterator

from k3lsp.wire.commandline import says_nothing


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m MODULE *args`` (a command as the user runs it), bounded."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


@functools.cache
def completion(module: str, shell: str) -> subprocess.CompletedProcess:
    """``python -m MODULE --print-completion SHELL``, run once per test process (k3-backend's imports mlx)."""
    return run(module, "--print-completion", shell)


def bash_completes(script: str, function: str, words: list[str]) -> list[str]:
    """What a real bash offers for the last of ``words`` with ``script`` (a completion script) sourced: the
    completion ``function`` called as bash calls it (COMP_WORDS, COMP_CWORD, COMP_LINE, COMP_POINT set)."""
    line = " ".join(words)
    program = (
        'source /dev/stdin; COMP_WORDS=("${@}"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; '
        f'{function} "$1" "${{@: -1}}" "${{@: -2:1}}"; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    done = subprocess.run(["bash", "-c", program, "bash", *words], input=script, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0, (line, done.stderr)
    return done.stdout.split()


def every(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and its subparsers, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                yield from every(sub)


def names(parser: argparse.ArgumentParser) -> set[str]:
    """Every subcommand and every long option of the command, which its completion script must name."""
    found = set()
    for p in every(parser):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.update(action.choices)
            found.update(o for o in action.option_strings if o.startswith("--"))
    return found


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
