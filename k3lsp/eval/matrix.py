"""The settings a sweep compares: `--matrix effort=low,high` runs each configuration on the same units.

An axis is a name and, per value, the settings it sets (the keys of ``k3lsp.core.options``, parsed and checked there
like any other setting), so an axis is one entry of :data:`AXES`. Several axes give their product, in the order
given; no ``--matrix`` gives the one configuration of the command line's own settings.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from k3lsp.core import options
from k3lsp.core.options import Options
from k3lsp.wire.protocol import EFFORTS
from k3lsp.witnesses.adapters import ADAPTERS

# axis -> value -> the settings that value sets
AXES: dict[str, dict[str, dict[str, Any]]] = {
    "effort": {e: {"thinkingEffort": e} for e in EFFORTS},
    # the analyzers' alerts sent with each unit for the model to triage (docs/witnesses.md): none, one, or all
    "witnesses": {
        "off": {"witnesses": []},
        **{n: {"witnesses": [n]} for n in ADAPTERS},
        "all": {"witnesses": [*ADAPTERS]},
    },
    # the refutation turn after each audit (docs/witnesses.md)
    "refute": {"off": {"refute": False}, "on": {"refute": True}},
}
DEFAULT = "default"  # the name of the configuration without --matrix


class MatrixError(ValueError):
    """A --matrix value that names no axis or value."""


@dataclass(frozen=True)
class Configuration:
    name: str  # "effort=low" (axes joined by ", "); DEFAULT without a matrix
    settings: dict[str, Any] = field(default_factory=dict)  # what it sets over the base options
    options: Options = field(default_factory=Options)


def parse(specs: Sequence[str], axes: Mapping[str, dict] = AXES) -> list[tuple[str, list[str]]]:
    """``["effort=low,high"]`` -> ``[("effort", ["low", "high"])]``; raises MatrixError for anything unknown."""
    out: list[tuple[str, list[str]]] = []
    for spec in specs:
        axis, sep, values = spec.partition("=")
        axis = axis.strip()
        if not sep or axis not in axes:
            raise MatrixError(f"--matrix {spec!r}: expected AXIS=V1,V2 with AXIS one of {', '.join(axes)}")
        if any(axis == seen for seen, _ in out):
            raise MatrixError(f"--matrix {axis} is given twice")
        chosen = list(dict.fromkeys(v.strip() for v in values.split(",") if v.strip()))
        unknown = [v for v in chosen if v not in axes[axis]]
        if not chosen or unknown:
            raise MatrixError(f"--matrix {axis}: values are {', '.join(axes[axis])}, not {', '.join(unknown) or '-'}")
        out.append((axis, chosen))
    return out


def configurations(base: Options, specs: Sequence[str], axes: Mapping[str, dict] = AXES) -> list[Configuration]:
    """Every configuration of the matrix over ``base`` (one, ``default``, without specs)."""
    chosen = parse(specs, axes)
    if not chosen:
        return [Configuration(DEFAULT, {}, base)]
    out = []
    for combo in itertools.product(*([(axis, v) for v in values] for axis, values in chosen)):
        settings = {k: v for axis, value in combo for k, v in axes[axis][value].items()}
        opts, errors = options.parse(settings, base)
        if errors:  # an axis whose entry the settings refuse: a mistake in AXES, said plainly
            raise MatrixError("; ".join(errors))
        out.append(Configuration(", ".join(f"{a}={v}" for a, v in combo), settings, opts))
    return out
