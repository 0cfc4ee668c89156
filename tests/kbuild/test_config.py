"""k3lsp/kbuild/config.py and defconfig.py: a .config's values, and a defconfig name made a .config with a small
tree's own Kconfig through kconfiglib, as make <name>_defconfig and make tinyconfig do."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lsp.kbuild import config, defconfig

KCONFIG = """\
mainmenu "Test"
config MODULES
\tbool "modules"
\tdefault y
config NET
\tbool "net"
\tdefault y
config E1000
\ttristate "e1000"
\tdepends on NET
config TTY
\tbool "tty"
\tdefault y
config EMBEDDED
\tbool "embedded"
config HZ
\tint "hz"
\tdefault 250
config 64BIT
\tbool "64-bit kernel" if "$(ARCH)" = "x86"
\tdefault "$(ARCH)" != "i386"
"""


def test_values_of_a_dot_config(tmp_path):
    text = '# Linux/x86 4.19.0 Kernel Configuration\nCONFIG_A=y\nCONFIG_B=m\nCONFIG_S="x y"\n# CONFIG_C is not set\n'
    read = config.parse(text)
    assert read.values == {"CONFIG_A": "y", "CONFIG_B": "m", "CONFIG_S": '"x y"'}
    assert (
        read.arch == "x86" and read.said("CONFIG_C") == "CONFIG_C is not set" and read.said("CONFIG_B") == "CONFIG_B=m"
    )
    assert config.parse(text).digest == read.digest != config.parse(text + "CONFIG_D=y\n").digest
    (tmp_path / "unset.config").write_text("# CONFIG_NET is not set\n")
    assert config.load(tmp_path / "unset.config").values == {}  # every symbol unset is still a .config
    (tmp_path / "not-a-config").write_text("hello\n")
    with pytest.raises(config.ConfigError, match=r"sets no CONFIG_ symbol: it is not a kernel .config"):
        config.load(tmp_path / "not-a-config")
    with pytest.raises(config.ConfigError, match=r"cannot be read .* give the path of a .config or a defconfig name"):
        config.load(tmp_path / "missing")


def small_tree(root: Path) -> Path:
    (root / "arch/x86/configs").mkdir(parents=True)
    (root / "kernel/configs").mkdir(parents=True)
    (root / "Kconfig").write_text(KCONFIG)
    (root / "arch/x86/configs/small_defconfig").write_text("CONFIG_E1000=m\n# CONFIG_TTY is not set\n")
    (root / "kernel/configs/tiny.config").write_text("CONFIG_EMBEDDED=y\n")
    (root / "arch/x86/configs/tiny.config").write_text("CONFIG_HZ=100\n")
    return root


def test_a_defconfig_and_tinyconfig_through_kconfiglib(tmp_path):
    root = small_tree(tmp_path)
    small = defconfig.expand(root, "small_defconfig")
    assert small.arch == "x86"
    assert (small.value("CONFIG_NET"), small.value("CONFIG_E1000"), small.value("CONFIG_TTY")) == ("y", "m", "n")
    tiny = defconfig.expand(root, "tinyconfig")
    assert tiny.value("CONFIG_NET") == "n" and tiny.value("CONFIG_EMBEDDED") == "y" and tiny.value("CONFIG_HZ") == "100"
    assert config.is_defconfig_name("x86_64_defconfig") and not config.is_defconfig_name("/a/.config")
    with pytest.raises(config.ConfigError, match=r"no arch/\*/configs/nope_defconfig in .*name a defconfig"):
        defconfig.expand(root, "nope_defconfig")


def test_tinyconfig_for_x86_64_is_64_bit_and_for_x86_is_not(tmp_path):
    """As arch/x86/Kconfig says: with ARCH=x86 (what make picks on an x86 host) 64BIT is a question allnoconfig
    answers no; ARCH=x86_64 answers it, and both read arch/x86 (SRCARCH)."""
    root = small_tree(tmp_path)
    wide = defconfig.expand(root, "tinyconfig", "x86_64")
    assert wide.value("CONFIG_64BIT") == "y" and wide.arch == "x86" and wide.value("CONFIG_HZ") == "100"
    assert defconfig.expand(root, "tinyconfig", "x86").value("CONFIG_64BIT") == "n"


def test_tinyconfig_keeps_what_allnoconfig_wrote_as_make_does(tmp_path):
    """make tinyconfig writes allnoconfig's .config, merges the fragments into it and reads it back (olddefconfig):
    a symbol the choice's default selected stays y after a fragment picks another entry (Linux 4.19 x86_64's
    STACK_VALIDATION, selected by UNWINDER_ORC, then UNWINDER_GUESS from tiny.config; conf says y)."""
    root = small_tree(tmp_path)
    (root / "Kconfig").write_text(
        KCONFIG + 'choice\n\tprompt "unwinder"\n\tdefault ORC\nconfig ORC\n\tbool "orc"\n\tselect CHECK\n'
        'config GUESS\n\tbool "guess"\nendchoice\nconfig CHECK\n\tbool "check"\n'
    )
    (root / "arch/x86/configs/tiny.config").write_text("CONFIG_GUESS=y\n")
    tiny = defconfig.expand(root, "tinyconfig")
    assert (tiny.value("CONFIG_GUESS"), tiny.value("CONFIG_ORC"), tiny.value("CONFIG_CHECK")) == ("y", "n", "y")
