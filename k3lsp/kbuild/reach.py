"""Whether a configuration builds one unit: its file's state (``k3lsp.kbuild.tree``) and the ``#if`` guards
around its first line (``k3lsp.kbuild.guards``), with the kernel tree found above the code.

A front end names a configuration as the user gave it (a ``.config`` path or a defconfig name) and asks per unit;
the tree is the nearest directory above the code with the top-level ``Kconfig``, ``Makefile`` and ``arch/`` of a
kernel, and its reading is kept per ``.config`` content (``tree.read``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from k3lsp.kbuild import defconfig, tree
from k3lsp.kbuild.config import ConfigError, is_defconfig_name, load
from k3lsp.kbuild.guards import Guards
from k3lsp.kbuild.state import Kind, State


def kernel_root(path: Path) -> Path | None:
    """The kernel tree holding ``path``: the nearest directory with ``Kconfig``, ``Makefile`` and ``arch/``."""
    for place in [path, *path.parents] if path.is_dir() else path.parents:
        if (place / "Kconfig").is_file() and (place / "Makefile").is_file() and (place / "arch").is_dir():
            return place
    return None


@dataclass(frozen=True)
class Reach:
    """One configuration's answer for the files and units of one kernel tree."""

    reading: tree.Reading

    @classmethod
    def of(cls, code: Path, kconfig: str) -> Reach:
        """The reach of ``kconfig`` (a ``.config`` path, or a defconfig name made with the tree's Kconfig) over
        the kernel tree holding ``code``; a ConfigError says what is wrong in one sentence."""
        root = kernel_root(code.resolve())
        if root is None:
            raise ConfigError(
                f"kconfig {kconfig!r}: {code} is in no kernel tree (no directory above it has Kconfig, Makefile and "
                "arch/): give a path inside one, or no kconfig"
            )
        config = defconfig.expand(root, kconfig) if is_defconfig_name(kconfig) else load(Path(kconfig).expanduser())
        return cls(tree.read(root, config))

    def units(self, path: Path, text: str, lines: list[int]) -> list[State]:
        """The state of each unit of a file, by its first line: not built when the file is not, or when a guard
        around the line rules it out; unknown when either cannot tell; else the file's (built-in or module)."""
        file = self.reading.file(path)
        if file.kind is Kind.NOT_BUILT:
            return [file] * len(lines)
        guards = Guards(text, self.reading.config, (file.kind is Kind.MODULE) if file.built else None)
        return [_combined(file, guards.at(line)) for line in lines]


def _combined(file: State, guard: State | None) -> State:
    if guard is None:
        return file
    if guard.kind is Kind.NOT_BUILT or file.built:
        return guard
    return file
