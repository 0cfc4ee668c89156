"""k3lsp/kbuild/reach.py: a unit's state from its file's and the guards around it, in the kernel tree found above
the code."""

from __future__ import annotations

import pytest

from k3lsp.kbuild.config import ConfigError
from k3lsp.kbuild.reach import Reach, kernel_root
from k3lsp.kbuild.state import Kind

SOURCE = (
    "int always(void) { return 0; }\n"  # 1
    "#ifdef CONFIG_DEBUG\n"  # 2
    "int debug(void) { return 1; }\n"  # 3
    "#endif\n"  # 4
    "#ifdef MODULE\n"  # 5
    "int as_module(void) { return 2; }\n"  # 6
    "#endif\n"  # 7
    "#if SOMETHING\n"  # 8
    "int unclear(void) { return 3; }\n"  # 9
    "#endif\n"  # 10
)


@pytest.fixture
def kernel(tmp_path):
    files = {
        "Kconfig": "",
        "Makefile": "core-y := kernel/\nvmlinux-dirs := $(patsubst %/,%,$(core-y))\n",
        "arch/x86/Makefile": "",
        "kernel/Makefile": "obj-y += core.o\nobj-$(CONFIG_NET) += net.o\nobj-m += mod.o\n",
        "kernel/core.c": SOURCE,
        "kernel/net.c": SOURCE,
        "kernel/mod.c": SOURCE,
        "kernel/other.c": SOURCE,
        ".config": "# Linux/x86 test Kernel Configuration\nCONFIG_DEBUG=y\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def states(reach: Reach, path, lines=(1, 3, 6, 9)) -> list[str]:
    return [str(s) for s in reach.units(path, path.read_text(), list(lines))]


def test_each_unit_gets_its_files_state_and_its_guards(kernel):
    reach = Reach.of(kernel / "kernel", str(kernel / ".config"))
    core = states(reach, kernel / "kernel/core.c")
    assert core[:2] == ["built-in", "built-in"]
    assert core[2] == "not built: line 5: `#ifdef MODULE` (the file is built in)"  # built in: MODULE is not defined
    assert core[3] == "unknown: line 8: `#if SOMETHING` (SOMETHING: not a config symbol)"
    assert states(reach, kernel / "kernel/mod.c")[:3] == ["module", "module", "module"]
    assert set(states(reach, kernel / "kernel/net.c")) == {
        "not built: kernel/Makefile:2: `obj-$(CONFIG_NET)` (CONFIG_NET is not set)"
    }
    other = reach.units(kernel / "kernel/other.c", SOURCE, [1, 3])
    assert [s.kind for s in other] == [Kind.UNKNOWN, Kind.UNKNOWN]  # no rule names it: the guards cannot build it


def test_the_tree_is_found_above_the_code_and_a_bad_kconfig_is_one_sentence(kernel, tmp_path_factory):
    assert kernel_root(kernel / "kernel" / "core.c") == kernel_root(kernel) == kernel
    elsewhere = tmp_path_factory.mktemp("plain")
    with pytest.raises(ConfigError, match=r"is in no kernel tree .*give a path inside one, or no kconfig"):
        Reach.of(elsewhere, str(kernel / ".config"))
    with pytest.raises(ConfigError, match=r"cannot be read .*give the path of a \.config or a defconfig name"):
        Reach.of(kernel, str(kernel / "no.config"))
