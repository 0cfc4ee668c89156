"""Command-line flags declared on the fields of the config dataclasses: one default per setting.

A field whose metadata is :func:`flag`'s is a setting of the config and a flag of ``k3-backend serve``: its default is
the flag's default and its help is the flag's help, so the number is written once and tests or other callers
that build the config without a command line get the same value. :func:`add_flags` adds a class's flags to a
parser, :func:`from_args` builds the class back from the parsed namespace (each flag's ``dest`` is its field's
name).
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Any

FLAG = "flag"  # the field metadata key that makes a field a flag


def flag(help: str, *, name: str | None = None, **options: Any) -> dict:
    """The metadata of a dataclass field that is also a flag (``--field-name`` unless ``name`` says otherwise):
    ``field(default=..., metadata=flag("what it does"))``. ``options`` go to ``add_argument`` (``type``,
    ``choices``, ``metavar``); the type is the default's own when not given, and a bool default is a switch
    that turns it on."""
    return {FLAG: {"help": help, "flag": name, **options}}


def add_flags(parser: argparse.ArgumentParser, config: type) -> None:
    """Add one option per :func:`flag` field of ``config``, with the field's default."""
    for f in fields(config):
        if FLAG not in f.metadata:
            continue
        options = dict(f.metadata[FLAG])
        name = options.pop("flag") or "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else f.default_factory()
        if isinstance(default, bool):
            options.setdefault("action", "store_true")
        elif default is not None:
            options.setdefault("type", type(default))
        parser.add_argument(name, dest=f.name, default=default, **options)


def from_args(config: type, args: argparse.Namespace, **given: Any) -> Any:
    """``config`` with each flag field as parsed and ``given`` for the fields that are not its flags."""
    return config(**{f.name: getattr(args, f.name) for f in fields(config) if FLAG in f.metadata}, **given)
