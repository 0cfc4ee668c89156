"""The state of a file or a unit in one kernel configuration, and why.

A finding in code the auditor's kernel never compiles is noise to them, so every file and unit carries one of four
states. ``not_built`` always says why (the config symbol, the Makefile rule or the ``#if`` that rules it out) and
``unknown`` says what could not be told, so a hint can show the reason rather than a bare word.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    """What a configuration does with a piece of code."""

    BUILT_IN = "built-in"
    MODULE = "module"
    NOT_BUILT = "not built"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class State:
    """One piece of code's kind in a configuration, with the reason (empty only for code that is built)."""

    kind: Kind
    reason: str = ""

    @property
    def built(self) -> bool:
        """Whether the configuration compiles it (into the kernel or a module)."""
        return self.kind in (Kind.BUILT_IN, Kind.MODULE)

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.reason}" if self.reason else self.kind.value


BUILT_IN = State(Kind.BUILT_IN)
MODULE = State(Kind.MODULE)
