"""`k3-backend`: a thin dispatcher. Each subcommand lives in its own module, which provides
`add_arguments(parser)` and `run(args) -> int`.

Only the chosen subcommand's module is imported: `serve` and `fidelity` pull in mlx (seconds, and a
JIT cache), which `k3-backend --help` or `keys init` have no use for.
"""

import argparse
import importlib
import sys
from typing import NamedTuple

from k3lsp.wire import commandline, ending


class Command(NamedTuple):
    module: str  # imported only when chosen
    summary: str  # the one-line help
    mlx: bool = True  # runs mlx: mlx.core is imported first, with signals deferred (_main)


COMMANDS = {
    "make-tiny": Command("backend.tiny", "write a tiny random-weight kimi_k3 checkpoint (tests, doctor)"),
    "serve": Command("backend.serve", "serve a kimi_k3 model to editors over ZeroMQ"),
    "demo": Command("backend.demo", "build a tiny model, serve it, audit C files through k3lsp, stop"),
    "fidelity": Command("backend.fidelity.cli", "the model card's fidelity tables for your build and traces"),
    "keys": Command("backend.keys", "create the daemon's CurveZMQ key pair and allow-list directory", mlx=False),
    "doctor": Command("backend.doctor", "check the ranks, the link and the memory before serving"),
    "supervise": Command(
        "backend.supervise",
        "run the pair (its mlx.launch command), restart it after failures, give up on repeated ones",
        mlx=False,
    ),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser with the arguments of the subcommand ``argv`` chooses, or of every one when it asks for a
    completion script (which names every flag: it imports the modules, mlx among them)."""
    parser = commandline.Parser(prog="k3-backend", description=__doc__.splitlines()[0])
    commandline.add_version_and_completion(parser)
    subparsers = parser.add_subparsers(dest="command", required=True)
    every = "--print-completion" in argv
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.summary)
        if every or (argv and argv[0] == name):
            importlib.import_module(command.module).add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every subcommand ends on a signal or a closed stdout as docs/cli.md says (k3lsp.wire.ending)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv[0] if argv and argv[0] in COMMANDS else None
    return ending.run("k3-backend" if name is None else f"k3-backend {name}", lambda: _main(argv, name))


def _main(argv: list[str], name: str | None) -> int:
    """``name``: the subcommand, which parsing requires (``args.command`` may be a subcommand's own argument:
    supervise's command line)."""
    if name is not None and COMMANDS[name].mlx:  # before the parser, which imports the subcommand's module
        with ending.deferred():  # a Ctrl-C while nanobind initialises mlx.core was swallowed there: raised after
            importlib.import_module("mlx.core")
    args = build_parser(argv).parse_args(argv)
    module = importlib.import_module(COMMANDS[name].module)
    try:
        return module.run(args)
    except BrokenPipeError:
        raise  # a closed stdout ends the command quietly
    except (ValueError, OSError) as e:
        print(f"k3-backend {name}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
