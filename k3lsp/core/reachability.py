"""Which units the ``kconfig`` setting's kernel configuration builds, for the audit service.

A finding in code the auditor's kernel never compiles is noise to them (docs/kernel.md). With ``kconfig`` set,
the service gives each unit its state (``k3lsp.kbuild.reach``: built-in, module, not built and why, unknown),
orders built code first, and in a job that asks for it (``Job.only_built``: ``--only-built``, a workspace audit
with ``unbuilt: hide``) leaves unbuilt units out, counting them with their reasons (:class:`Skipped`).

A configuration is read once per kernel tree: a ``.config`` again only when its file changes (``k3lsp.kbuild.tree``
keeps each reading by content), a defconfig name (which runs the tree's Kconfig through kconfiglib, seconds on
Linux) once per process. A relative ``.config`` path is relative to the kernel tree's top, where ``make`` writes it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.kbuild.config import ConfigError, is_defconfig_name
from k3lsp.kbuild.reach import Reach, kernel_root
from k3lsp.kbuild.state import Kind, State
from k3lsp.units.split import Unit

FILES_NAMED = 5  # files named with their reason in the tally's sentence, at most
ORDER = {Kind.BUILT_IN: 0, Kind.MODULE: 0, Kind.UNKNOWN: 1, Kind.NOT_BUILT: 2}  # built code is audited first


def rank(state: State | None) -> int:
    """Where a unit of this state goes in a run's queue: built code first, then unknown, then not built."""
    return 1 if state is None else ORDER[state.kind]


class Reachability:
    """The ``kconfig`` setting's reach over the kernel trees a process audits, cached per tree."""

    def __init__(self) -> None:
        self._known: dict[tuple[Path, str], tuple[tuple[int, int] | None, Reach]] = {}
        self._lock = threading.Lock()  # documents are prepared in threads: one reading per tree at a time

    def file_rank(self, path: Path, kconfig: str) -> int:
        """Where a file goes in a workspace audit's order: its own state's :func:`rank` (its units' guards are
        read only when it is split); unknown when the kconfig cannot tell."""
        try:
            return rank(self.reach(path, kconfig).reading.file(path))
        except ConfigError:
            return rank(None)

    def reach(self, code: Path, kconfig: str) -> Reach:
        """The reach of ``kconfig`` over the kernel tree holding ``code``; a ConfigError names the value and what
        is wrong in one sentence."""
        root = kernel_root(code.resolve())
        if root is None:
            return Reach.of(code, kconfig)  # raises: the sentence says the code is in no kernel tree
        given = kconfig if is_defconfig_name(kconfig) else str(root / Path(kconfig).expanduser())
        stamp = None if is_defconfig_name(kconfig) else _stamp(Path(given))
        with self._lock:
            known = self._known.get((root, kconfig))
            if known is None or known[0] != stamp:
                known = (stamp, Reach.of(root, given))
                self._known[(root, kconfig)] = known
            return known[1]

    def problem(self, code: Path, kconfig: str) -> str | None:
        """Why ``kconfig`` cannot say what is built around ``code`` (None: it can): what a front end says once."""
        try:
            self.reach(code, kconfig)
        except ConfigError as error:
            return str(error)
        return None

    def states(self, path: Path, text: str, units: tuple[Unit, ...], kconfig: str) -> tuple[State, ...]:
        """The state of each unit of a file's text, by its first line. Raises ConfigError."""
        return tuple(self.reach(path, kconfig).units(path, text, [u.start_line + 1 for u in units]))

    def built(self, path: Path, text: str, units: tuple[Unit, ...], kconfig: str) -> tuple[Unit, ...]:
        """The units a job that audits only built code sends: all but those not built (unknown ones are sent), and
        all of them where the kconfig cannot tell, as the service sends them."""
        try:
            states = self.states(path, text, units, kconfig)
        except ConfigError:
            return units
        return tuple(u for u, s in zip(units, states, strict=True) if s.kind is not Kind.NOT_BUILT)


def _stamp(path: Path) -> tuple[int, int] | None:
    """When a ``.config`` was last written, and its size: read again when either moves."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


@dataclass
class Skipped:
    """The units a job's configuration does not build, by file: counted whether or not they were left out, for
    the one sentence a report says about them."""

    kconfig: str
    only_built: bool
    kinds: Counter[Kind] = field(default_factory=Counter)
    unbuilt: dict[str, tuple[int, str]] = field(default_factory=dict)  # file -> (units not built, the first reason)

    def merge(self, other: Skipped) -> None:
        """Another job's count added to this one (a workspace audit is a job per file)."""
        self.kinds.update(other.kinds)
        for path, (count, reason) in other.unbuilt.items():
            self.unbuilt[path] = (self.unbuilt.get(path, (0, reason))[0] + count, reason)

    def add(self, relpath: str, states: Iterable[State | None]) -> None:
        """The states of the units one document picked (left out or not); None, a unit with none, is skipped."""
        states = [s for s in states if s is not None]
        self.kinds.update(s.kind for s in states)
        dropped = [s for s in states if s.kind is Kind.NOT_BUILT]
        if dropped:
            count, reason = self.unbuilt.get(relpath, (0, dropped[0].reason))
            self.unbuilt[relpath] = (count + len(dropped), reason)

    def said(self) -> str | None:
        """How many units are not built and why (the files with the most first), or None when every one is."""
        if not self.unbuilt:
            return None
        total = sum(self.kinds.values())
        what = (
            ", skipped (--only-built, unbuilt: hide)"
            if self.only_built
            else " (audited all the same; --only-built or unbuilt: hide skips them)"
        )
        named = sorted(self.unbuilt.items(), key=lambda item: -item[1][0])
        files = ", ".join(f"{count} in {path} ({reason})" for path, (count, reason) in named[:FILES_NAMED])
        more = f" and {len(named) - FILES_NAMED} more files" if len(named) > FILES_NAMED else ""
        counts = ", ".join(f"{k.value} {self.kinds[k]}" for k in (Kind.BUILT_IN, Kind.MODULE, Kind.UNKNOWN))
        return (
            f"kconfig {self.kconfig}: {self.kinds[Kind.NOT_BUILT]} of {total} units not built{what}: {files}{more}; "
            f"{counts}"
        )
