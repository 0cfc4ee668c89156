"""`k3-backend`: a thin dispatcher. Each subcommand lives in its own module, which provides
`add_parser(subparsers)` (registering the subcommand under its name) and `run(args) -> int`."""

import argparse
import sys

from backend import demo, doctor, keys, serve, tiny
from backend.fidelity import cli as fidelity

COMMANDS = {"make-tiny": tiny, "serve": serve, "demo": demo, "fidelity": fidelity, "keys": keys, "doctor": doctor}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="k3-backend", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(subparsers)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (ValueError, OSError) as e:
        print(f"k3-backend {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
