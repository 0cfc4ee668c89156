"""k3lsp/kbuild/tree.py on small kernel-like trees each test writes: every construct of kbuild's Makefiles that
decides whether a file is built, and the reason a file that is not built gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lsp.kbuild import tree
from k3lsp.kbuild.config import parse
from k3lsp.kbuild.state import Kind

TOP = """\
init-y := init/
drivers-y := drivers/
core-y := kernel/
include arch/$(SRCARCH)/Makefile
core-y += mm/
vmlinux-dirs := $(patsubst %/,%,$(filter %/, $(init-y) $(core-y) $(drivers-y) $(core-m)))
"""
ARCH = """\
ifeq ($(CONFIG_X86_32),y)
BITS := 32
else
BITS := 64
endif
export BITS
core-y += arch/x86/
drivers-$(CONFIG_PCI) += arch/x86/pci/
"""


def kernel(root: Path, files: dict[str, str], config: str) -> tree.Reading:
    """Writes a tree (the top Makefile and arch/x86/Makefile above, then ``files``) and reads it under ``config``,
    each C file named by a Makefile written empty unless ``files`` gives it."""
    for name, text in {"Makefile": TOP, "arch/x86/Makefile": ARCH, "scripts/Kbuild.include": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return tree.read(root, parse("# Linux/x86 test Kernel Configuration\n" + config))


def state(reading: tree.Reading, path: str) -> str:
    return str(reading.file(path))


def test_obj_y_obj_m_and_an_unset_symbol(tmp_path):
    files = {
        "kernel/Makefile": "obj-y += fork.o\nobj-$(CONFIG_KEXEC) += kexec.o\nobj-$(CONFIG_BPF) += bpf.o\n",
        "kernel/fork.c": "",
        "kernel/kexec.c": "",
        "kernel/bpf.c": "",
        "kernel/orphan.c": "",
    }
    reading = kernel(tmp_path, files, "CONFIG_KEXEC=m\n# CONFIG_BPF is not set\n")
    assert state(reading, "kernel/fork.c") == "built-in"
    assert state(reading, "kernel/kexec.c") == "module"
    assert state(reading, "kernel/bpf.c") == (
        "not built: kernel/Makefile:3: `obj-$(CONFIG_BPF)` (CONFIG_BPF is not set)"
    )
    assert reading.file("kernel/orphan.c").kind is Kind.UNKNOWN
    assert "no rule of kernel/Makefile names orphan.o" in state(reading, "kernel/orphan.c")


def test_subdirectories_entered_or_not_and_the_reason_passes_down(tmp_path):
    files = {
        "drivers/Makefile": "obj-$(CONFIG_NET) += net/\nobj-$(CONFIG_USB) += usb/\nsubdir-y += tty\n",
        "drivers/net/Makefile": "obj-y += core.o\nobj-$(CONFIG_E1000) += e1000/\n",
        "drivers/net/core.c": "",
        "drivers/net/e1000/Makefile": "obj-y += main.o\n",
        "drivers/net/e1000/main.c": "",
        "drivers/usb/Makefile": "obj-y += hub.o\n",
        "drivers/usb/host/x.c": "",
        "drivers/tty/Kbuild": "obj-y += tty.o\n",
        "drivers/tty/Makefile": "obj-y += not-this.o\n",
        "drivers/tty/tty.c": "",
    }
    reading = kernel(tmp_path, files, "CONFIG_NET=y\nCONFIG_E1000=m\n")
    assert state(reading, "drivers/net/core.c") == "built-in"
    assert state(reading, "drivers/net/e1000/main.c") == "module"  # obj-y in a directory entered for a module
    assert state(reading, "drivers/usb/host/x.c") == (
        "not built: drivers/usb/ is not entered: drivers/Makefile:2: `obj-$(CONFIG_USB)` (CONFIG_USB is not set)"
    )
    assert state(reading, "drivers/tty/tty.c") == "built-in"  # subdir-y, and Kbuild read before Makefile


def test_composite_objects_and_their_parts(tmp_path):
    files = {
        "kernel/Makefile": (
            "obj-$(CONFIG_EXT4) += ext4.o\next4-y := super.o inode.o\next4-$(CONFIG_ACL) += acl.o\n"
            "obj-$(CONFIG_XFS) += xfs.o\nxfs-objs := xfs_super.o\n"
            "obj-m += both.o\nobj-y += both.o\n"
        ),
        **{f"kernel/{name}.c": "" for name in ("super", "inode", "acl", "xfs_super", "both")},
    }
    reading = kernel(tmp_path, files, "CONFIG_EXT4=m\n")
    assert state(reading, "kernel/super.c") == state(reading, "kernel/inode.c") == "module"
    assert (
        state(reading, "kernel/acl.c") == "not built: kernel/Makefile:3: `ext4-$(CONFIG_ACL)` (CONFIG_ACL is not set)"
    )
    assert state(reading, "kernel/xfs_super.c") == (
        "not built: a part of kernel/xfs.o, which is not built: kernel/Makefile:4: `obj-$(CONFIG_XFS)` "
        "(CONFIG_XFS is not set)"
    )
    assert state(reading, "kernel/both.c") == "built-in"  # obj-m less what obj-y has


def test_conditionals_continuations_lib_and_assignment_flavours(tmp_path):
    files = {
        "mm/Makefile": (
            "ifdef CONFIG_MMU\nmmu-y := memory.o \\\n\tmmap.o\nelse\nmmu-y := nommu.o\nendif\n"
            "obj-y += $(mmu-y)\n"
            "ifeq ($(CONFIG_NUMA),y)\nobj-y += numa.o\nendif\n"
            "lib-y += string.o\n"
            "late = $(early)\nearly := slab.o\nobj-y += $(late)\n"
            "now := $(undefined_yet)\nundefined_yet := never.o\nobj-y += $(now)\n"
            "obj-$(CONFIG_BITS$(BITS)) += bits64.o  # the arch Makefile's exported BITS\n"
        ),
        **{f"mm/{name}.c": "" for name in ("memory", "mmap", "nommu", "numa", "string", "slab", "never", "bits64")},
    }
    reading = kernel(tmp_path, files, "CONFIG_MMU=y\nCONFIG_BITS64=y\n")
    for name in ("memory", "mmap", "string", "slab", "bits64"):
        assert state(reading, f"mm/{name}.c") == "built-in", name
    assert state(reading, "mm/nommu.c") == "not built: mm/Makefile:4: an earlier branch of its conditional was taken"
    assert state(reading, "mm/numa.c") == "not built: mm/Makefile:8: `ifeq ($(CONFIG_NUMA),y)` (CONFIG_NUMA is not set)"
    assert reading.file("mm/never.c").kind is Kind.UNKNOWN  # := expanded before never.o was named


def test_the_top_level_and_other_architectures(tmp_path):
    files = {
        "arch/x86/Makefile": ARCH,
        "arch/x86/Kbuild": "obj-y += kernel/\n",
        "arch/x86/kernel/Makefile": "obj-y += setup.o\n",
        "arch/x86/kernel/setup.c": "",
        "arch/x86/pci/Makefile": "obj-y += pci.o\n",
        "arch/x86/pci/pci.c": "",
        "arch/arm/kernel/setup.c": "",
        "tools/perf/perf.c": "",
        "kernel/Makefile": "",
        "include/linux/list.h": "",
    }
    reading = kernel(tmp_path, files, "")
    assert state(reading, "arch/x86/kernel/setup.c") == "built-in"
    assert state(reading, "arch/x86/pci/pci.c") == (
        "not built: arch/x86/pci/ is not entered: arch/x86/Makefile:8: `drivers-$(CONFIG_PCI)` (CONFIG_PCI is not set)"
    )
    assert state(reading, "arch/arm/kernel/setup.c") == (
        "not built: arch/arm/ is another architecture's (the configuration is x86)"
    )
    assert state(reading, "tools/perf/perf.c") == "unknown: no rule of the top Makefile enters tools/"
    assert state(reading, "include/linux/list.h") == "unknown: a header: built wherever a built file includes it"
    assert reading.file(tmp_path / "kernel" / "fork.c").kind is Kind.UNKNOWN  # absolute paths inside the tree
    assert "outside the kernel tree" in str(reading.file("/elsewhere/x.c"))


def test_a_reading_is_kept_per_config_content(tmp_path):
    files = {"kernel/Makefile": "obj-$(CONFIG_A) += a.o\n", "kernel/a.c": ""}
    first = kernel(tmp_path, files, "CONFIG_A=y\n")
    assert tree.read(tmp_path, parse("# Linux/x86 test Kernel Configuration\nCONFIG_A=y\n")) is first
    other = kernel(tmp_path, files, "CONFIG_A=m\n")
    assert other is not first and state(other, "kernel/a.c") == "module"


@pytest.mark.parametrize("text", ["obj-y += $(shell echo a.o)\n", "obj-y != echo a.o\n"])
def test_make_runs_no_shell_and_says_it_was_unsure(tmp_path, text):
    marker = tmp_path / "ran"
    files = {"kernel/Makefile": text.replace("echo a.o", f"touch {marker}; echo a.o"), "kernel/a.c": ""}
    reading = kernel(tmp_path, files, "")
    assert not marker.exists()
    assert reading.file("kernel/a.c").kind is Kind.UNKNOWN
    assert any("not run" in u or "shell command" in u for u in reading.unsure), reading.unsure


def test_an_export_before_the_assignment_and_tab_indented_lines_outside_rules(tmp_path):
    """Linux 4.19's arch/x86/Makefile says ``export BITS`` before it sets BITS (foo_$(BITS).o was unknown), and
    mm/Makefile indents ``obj-y += nobootmem.o`` with a tab inside ``ifdef`` (read as a recipe, it was unknown);
    a tab line after a rule is its recipe still."""
    arch = "export BITS\nifeq ($(CONFIG_X86_32),y)\nBITS := 32\nelse\nBITS := 64\nendif\ncore-y += arch/x86/\n"
    files = {
        "arch/x86/Makefile": arch,
        "arch/x86/Kbuild": "obj-y += entry_$(BITS).o\n",
        "arch/x86/entry_64.c": "",
        "mm/Makefile": "ifdef CONFIG_MMU\n\tobj-y += nobootmem.o\nendif\nx.o: y.c\n\tobj-y += recipe.o\n",
        "mm/nobootmem.c": "",
        "mm/recipe.c": "",
        "kernel/Makefile": "",
    }
    reading = kernel(tmp_path, files, "CONFIG_MMU=y\n")
    assert state(reading, "arch/x86/entry_64.c") == "built-in"
    assert state(reading, "mm/nobootmem.c") == "built-in"
    assert reading.file("mm/recipe.c").kind is Kind.UNKNOWN


def test_a_directory_reached_for_a_module_and_built_in_is_built_in(tmp_path):
    """kbuild links what obj-y names in a directory entered from obj-y, whichever way it was reached first."""
    files = {
        "drivers/Makefile": "obj-y += shared/\nsubdir-m += shared\n",
        "drivers/shared/Makefile": "obj-y += lib.o\n",
        "drivers/shared/lib.c": "",
        "kernel/Makefile": "",
    }
    assert state(kernel(tmp_path, files, ""), "drivers/shared/lib.c") == "built-in"


def test_an_include_outside_the_tree_is_not_read(tmp_path):
    """A hostile tree's Makefile may include any path; only files inside the tree are read (here a file beside it
    that would add an object)."""
    root = tmp_path / "tree"
    outside = tmp_path / "outside.mk"
    outside.write_text("obj-y += planted.o\n")
    files = {"kernel/Makefile": f"include {outside}\ninclude ../../outside.mk\n", "kernel/planted.c": ""}
    root.mkdir()
    reading = kernel(root, files, "")
    assert reading.file("kernel/planted.c").kind is Kind.UNKNOWN
    assert any("outside the tree" in u for u in reading.unsure), reading.unsure
