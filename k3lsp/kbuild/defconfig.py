"""A defconfig name made a ``.config`` with the tree's own Kconfig, through kconfiglib.

``make x86_64_defconfig`` loads ``arch/x86/configs/x86_64_defconfig`` over the Kconfig defaults; ``make
tinyconfig`` is ``allnoconfig`` with ``kernel/configs/tiny.config`` and ``arch/$(SRCARCH)/configs/tiny.config``
merged in. kconfiglib (the Kconfig implementation Zephyr and others keep) does the same steps here, with the
environment kbuild gives Kconfig (``srctree``, ``ARCH``, ``SRCARCH``, ``CC``). Like ``make``, it runs the
``$(shell,...)`` macros the tree's Kconfig files hold (the compiler's version and options): naming a defconfig
runs what the tree's ``make defconfig`` would; a ``.config`` path runs nothing.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import kconfiglib

from k3lsp.kbuild.config import ALLNO, Config, ConfigError, parse

SOURCE_ARCH = {"x86_64": "x86", "i386": "x86", "sparc32": "sparc", "sparc64": "sparc", "sh64": "sh"}  # as Makefile
_LOCK = threading.Lock()  # kconfiglib reads its environment from os.environ, one tree at a time


def expand(root: Path, name: str, arch: str = "x86") -> Config:
    """The configuration ``make ARCH=<arch> <name>`` would write in ``root`` (``x86_64_defconfig``,
    ``defconfig``, ``tinyconfig``, ``allnoconfig``). ``arch`` is make's ARCH (``x86_64`` reads ``arch/x86``)."""
    source = SOURCE_ARCH.get(arch, arch)
    fragments: list[Path] = []
    if name not in ALLNO:
        found = _defconfig(root, name, source)
        where = found.parent.parent.name if found.parent.name == "configs" else found.parent.name
        arch, source = (arch, source) if where == source else (where, where)
    elif name == "tinyconfig":
        fragments = [root / "kernel/configs/tiny.config", root / f"arch/{source}/configs/tiny.config"]
    with _environment(root, arch, source):
        try:
            kconfig = kconfiglib.Kconfig(str(root / "Kconfig"), warn=False)
        except (kconfiglib.KconfigError, OSError) as error:
            raise ConfigError(f"kconfig {name!r}: the Kconfig of {root} cannot be read: {error}") from None
        with tempfile.TemporaryDirectory(prefix="k3lsp-kconfig-") as scratch:
            written = Path(scratch) / ".config"
            if name in ALLNO:
                _allno(kconfig)
                kconfig.write_config(str(written))  # as make: allnoconfig's .config, the fragments merged into it
                kconfig.load_config(str(written))
                for fragment in fragments:
                    if fragment.is_file():
                        kconfig.load_config(str(fragment), replace=False)
            else:
                kconfig.load_config(str(found))
            header = f"# Linux/{source} Kernel Configuration ({name}, ARCH={arch}, kconfiglib)\n"
            kconfig.write_config(str(written), header=header)
            return parse(written.read_text())


def _defconfig(root: Path, name: str, arch: str) -> Path:
    """The file a defconfig name means: the given architecture's first (``arch/um`` has an ``x86_64_defconfig``
    too), else the one architecture that has it."""
    own = root / "arch" / arch / "configs" / name
    if name == "defconfig" and (root / "arch" / arch / "defconfig").is_file():
        own = root / "arch" / arch / "defconfig"
    found = [own] if own.is_file() else sorted(root.glob(f"arch/*/configs/{name}"))
    if not found:
        raise ConfigError(f"kconfig {name!r}: no arch/*/configs/{name} in {root}: name a defconfig of the tree")
    return found[0]


def _allno(kconfig: kconfiglib.Kconfig) -> None:
    """conf --allnoconfig: every symbol as low as it may go (``option allnoconfig_y`` ones stay y)."""
    for symbol in kconfig.unique_defined_syms:
        symbol.set_value(2 if symbol.is_allnoconfig_y else 0)


@contextmanager
def _environment(root: Path, arch: str, source: str) -> Iterator[None]:
    """The variables kbuild exports to Kconfig, set while kconfiglib reads the tree, then put back."""
    values = {"srctree": str(root), "ARCH": arch, "SRCARCH": source, "CC": "gcc", "LD": "ld", "HOSTCC": "gcc"}
    values |= {"KERNELVERSION": "", "CC_VERSION_TEXT": "gcc"}
    with _LOCK:
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
