"""A kernel ``.config`` read as kbuild reads it: ``CONFIG_X=y``, ``=m``, a number or a string, and ``# CONFIG_X is
not set``.

A symbol the file does not name is unset, as it is for make and for the C preprocessor. The content's digest keys
every reading made from it (``k3lsp.kbuild.tree``), so the same ``.config`` is read once whatever its path.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.wire import supplied

_SET = re.compile(r"^(CONFIG_\w+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_\w+) is not set$", re.MULTILINE)
_ARCH = re.compile(r"^# Linux/(\w+) ", re.MULTILINE)  # the first line kconfig writes: "# Linux/x86 4.19.0 Kernel ..."
MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a flag names it: /dev/zero or a FIFO there is refused (a .config: ~200 KB)
ALLNO = ("allnoconfig", "tinyconfig")  # the configurations made from no defconfig file (k3lsp.kbuild.defconfig)


def is_defconfig_name(value: str) -> bool:
    """Whether a ``kconfig`` setting names a configuration to generate (``k3lsp.kbuild.defconfig``, which runs
    the tree's Kconfig) rather than a file."""
    return "/" not in value and (value.endswith("defconfig") or value in ALLNO)


class ConfigError(ValueError):
    """A ``.config`` that cannot be read: the message names the file and what to give instead."""


@dataclass(frozen=True)
class Config:
    """The symbol values of one configuration, by full name (``CONFIG_NET``): ``y``, ``m``, a number, or a string
    with its quotes, as make sees them. ``digest`` is the content's sha256."""

    values: dict[str, str] = field(hash=False)
    digest: str
    arch: str | None = None  # the source architecture its header names, when it names one

    def value(self, symbol: str) -> str:
        """The value of ``CONFIG_X`` (``n`` when unset), for the reasons a reading gives."""
        return self.values.get(symbol, "n")

    def said(self, symbol: str) -> str:
        """How a reason says a symbol's value: ``CONFIG_X is not set`` or ``CONFIG_X=m``."""
        value = self.values.get(symbol)
        return f"{symbol} is not set" if value in (None, "n", "") else f"{symbol}={value}"


def parse(text: str) -> Config:
    """The values a ``.config``'s text sets; lines of any other form are comments to kbuild and are skipped."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if match := _SET.match(line):
            values[match.group(1)] = match.group(2)
        elif match := _UNSET.match(line):
            values.pop(match.group(1), None)
    arch = _ARCH.search(text)
    return Config(values, hashlib.sha256(text.encode()).hexdigest(), arch.group(1) if arch else None)


def load(path: Path) -> Config:
    """The ``.config`` at ``path``; a file that is missing or not text is one clear error."""
    try:
        text = supplied.read(path, MAX_CONFIG_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(
            f"kconfig {str(path)!r} cannot be read ({error}): give the path of a .config or a defconfig name"
        ) from None
    config = parse(text)
    if not config.values and text.strip() and not _UNSET.search(text):  # an all-"is not set" one is a .config
        raise ConfigError(f"kconfig {str(path)!r} sets no CONFIG_ symbol: it is not a kernel .config")
    return config
