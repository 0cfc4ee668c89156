"""`k3-backend keys init`: the daemon's CurveZMQ key pair and the ``authorized/`` directory of client keys.

The files are made by k3lsp.wire.keys (secret 0600 in a 0700 directory), the same code the editors use, so
both sides agree on the format; this module only parses the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from k3lsp.wire import keys


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="keys_command", required=True)
    init = sub.add_parser("init", help="create server.key, server.key_secret and authorized/")
    init.add_argument(
        "--dir",
        type=Path,
        default=keys.default_dir("k3-backend"),
        help="where to create them (default: the user config directory)",
    )
    init.add_argument("--force", action="store_true", help="replace an existing key pair")


def run(args: argparse.Namespace) -> int:
    try:
        print(keys.init_server(args.dir.expanduser(), force=args.force))
    except keys.KeyFileError as exc:
        print(f"k3-backend keys init: {exc}", file=sys.stderr)
        return 2
    return 0
