"""Kconfig-aware reachability against kbuild itself: which files our reading (k3lsp.kbuild) says a configuration
builds, beside the objects GNU make computes from the same Makefiles.

    uv run python bench/kbuild_agreement.py TREE CONFIG [--arch x86] [--limit 40]
    uv run python bench/kbuild_agreement.py --quick     # a small tree the script builds (what tests/bench runs)

CONFIG is a ``.config`` path or a defconfig name (``x86_64_defconfig``, ``tinyconfig``: made with the tree's own
Kconfig through kconfiglib, k3lsp.kbuild.defconfig). kbuild's side runs GNU make the way
``scripts/Makefile.build`` does, directory by directory, without compiling anything: a printer makefile includes
the ``.config`` (what ``include/config/auto.conf`` holds), ``scripts/Kbuild.include``, the directory's ``Kbuild``
(else ``Makefile``) and ``scripts/Makefile.lib``, and prints ``real-obj-y``, ``lib-y``, ``extra-y`` (built in),
``real-obj-m`` (modules) and ``subdir-ym`` (where kbuild goes next). The directories it starts from are the top
Makefile's ``vmlinux-dirs``, computed by make from the top Makefile's own assignments of ``init-y`` ... ``virt-y``
and ``vmlinux-dirs`` with ``arch/$(SRCARCH)/Makefile`` included where the top Makefile includes it (the rest of the
top Makefile needs a configured build directory and is not read).

With ``--units`` (always in ``--quick``), every ``.c`` file is also split as an audit splits it and its units
counted by state (the file's, and the ``#if`` guards around each unit: k3lsp.kbuild.reach).

Prints the time of each side (ours cold, then again from its cache), the states of the tree's ``.c``/``.S`` files
in our reading, and ``ratio kbuild_agreement = X``: over the files compared (those either side builds, and those
in a directory kbuild enters), the share where both say built or both say not built (our ``unknown`` counts as not
built). Every disagreement is listed up to ``--limit``, with the count.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k3lsp.kbuild import defconfig, tree
from k3lsp.kbuild.config import Config, ConfigError, is_defconfig_name, load
from k3lsp.kbuild.reach import Reach
from k3lsp.units import split as units

PRINTER = """\
src := $(obj)
include $(K3_CONFIG)
srctree := .
include scripts/Kbuild.include
kbuild-dir := $(srctree)/$(src)
kbuild-file := $(if $(wildcard $(kbuild-dir)/Kbuild),$(kbuild-dir)/Kbuild,$(kbuild-dir)/Makefile)
include $(kbuild-file)
include scripts/Makefile.lib
$(info K3 built-in $(real-obj-y) $(lib-y) $(filter %.o,$(extra-y)))
$(info K3 module $(real-obj-m))
$(info K3 subdirs $(subdir-ym))
k3-print: ;@:
"""
TOP_NAMES = re.compile(r"^(?:(?:init|core|drivers|net|libs|virt)-[ym]|vmlinux-dirs)\s*(?::=|\+=|=)")
SIMPLE = [f"{flags} :=" for flags in ("KBUILD_CFLAGS", "KBUILD_AFLAGS", "KBUILD_CPPFLAGS", "KBUILD_LDFLAGS")]
# the top Makefile makes these simple (`:=`) before the arch Makefile adds to them with cc-option, which reads them
MAKE_TIMEOUT = 120  # seconds for one directory's make


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path, help="a kernel tree")
    parser.add_argument("config", nargs="?", help="a .config path or a defconfig name (x86_64_defconfig, tinyconfig)")
    parser.add_argument(
        "--arch", default="x86", help="ARCH for a defconfig name (default x86; x86_64 for a 64-bit tinyconfig)"
    )
    parser.add_argument("--limit", type=int, default=40, help="disagreements listed, at most")
    parser.add_argument("--units", action="store_true", help="also split every .c file and count its units' states")
    parser.add_argument("--quick", action="store_true", help="a small tree built by the script")
    args = parser.parse_args(argv)
    if args.quick == (args.tree is not None):
        parser.error("give a TREE and a CONFIG, or --quick")
    with tempfile.TemporaryDirectory(prefix="k3-kbuild-") as scratch:
        root = quick_tree(Path(scratch) / "tree") if args.quick else args.tree.resolve()
        try:
            config = configuration(root, "quick.config" if args.quick else args.config, args.arch)
        except ConfigError as error:
            print(error, file=sys.stderr)
            return 2
        written = Path(scratch) / "config.mk"
        written.write_text("".join(f"{name}={value}\n" for name, value in config.values.items()))
        return compare(root, config, written, args.limit, args.units or args.quick)


def configuration(root: Path, given: str | None, arch: str) -> Config:
    """The configuration to compare under: a defconfig name made with the tree's Kconfig, else a file."""
    if given is None:
        raise ConfigError("give a CONFIG: a .config path or a defconfig name")
    if is_defconfig_name(given):
        started = time.perf_counter()
        config = defconfig.expand(root, given, arch)
        print(
            f"{given}: {len(config.values)} symbols set, made with kconfiglib in {time.perf_counter() - started:.1f} s"
        )
        return config
    path = Path(given) if Path(given).is_absolute() else root / given
    return load(path if path.exists() else Path(given))


def compare(root: Path, config: Config, written: Path, limit: int, with_units: bool) -> int:
    started = time.perf_counter()
    reading = tree.read(root, config)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    tree.read(root, config)
    cached = time.perf_counter() - started
    print(
        f"ours: {len(reading.entered)} directories, {len(reading.objects)} objects in {cold:.2f} s "
        f"(again from the cache: {cached * 1000:.2f} ms); {len(reading.unsure)} things it could not tell"
    )
    started = time.perf_counter()
    built, entered = kbuild(root, written, reading.arch)
    print(
        f"kbuild (GNU make): {len(entered)} directories, {len(built)} objects in {time.perf_counter() - started:.1f} s"
    )
    sources = sorted(
        str(p.relative_to(root)) for suffix in ("*.c", "*.S") for p in root.rglob(suffix) if ".git" not in p.parts
    )
    states = Counter(reading.file(s).kind.value for s in sources)
    print("our files: " + ", ".join(f"{kind} {count}" for kind, count in sorted(states.items())))
    compared = agree = 0
    disagreements: list[str] = []
    for source in sources:
        ours = reading.file(source)
        theirs = os.path.splitext(source)[0] + ".o" in built
        if not (ours.built or theirs or os.path.dirname(source) in entered):
            continue
        compared += 1
        if ours.built == theirs:
            agree += 1
        else:
            disagreements.append(f"  {source}: kbuild {'builds' if theirs else 'does not build'} it, ours: {ours}")
    print(f"ratio kbuild_agreement = {agree / compared if compared else 0:.6f} ({agree} of {compared} files)")
    print(f"disagreements: {len(disagreements)}" + (f" (the first {limit})" if len(disagreements) > limit else ""))
    print("\n".join(disagreements[:limit]))
    if with_units:
        count_units(root, reading, [s for s in sources if s.endswith(".c")])
    return 0


def count_units(root: Path, reading: tree.Reading, sources: list[str]) -> None:
    """Every ``.c`` file split as an audit splits it, each unit's state by k3lsp.kbuild.reach (its file's and the
    guards around its first line)."""
    started = time.perf_counter()
    reach = Reach(reading)
    kinds: Counter[str] = Counter()
    for source in sources:
        text = (root / source).read_text(errors="replace")
        found = units.split(text)
        kinds.update(s.kind.value for s in reach.units(root / source, text, [u.start_line + 1 for u in found]))
    took = time.perf_counter() - started
    shown = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    print(
        f"our units: {shown} ({sum(kinds.values())} units of {len(sources)} .c files, split and read in {took:.1f} s)"
    )


def kbuild(root: Path, config: Path, arch: str) -> tuple[set[str], set[str]]:
    """The objects kbuild builds (built in or modules) and the directories it enters, by GNU make."""
    with tempfile.TemporaryDirectory(prefix="k3-kbuild-make-") as scratch:
        printer = Path(scratch) / "printer.mk"
        printer.write_text(PRINTER)
        top = Path(scratch) / "top.mk"
        top.write_text(top_printer(root))
        common = [f"K3_CONFIG={config}", f"ARCH={arch}", f"SRCARCH={arch}"]
        lines = make(root, top, common)
        dirs = [d for d in lines.get("dirs", []) if (root / d).is_dir()]
        common += [f"BITS={' '.join(lines.get('BITS', []))}"]
        built: set[str] = set()
        entered: set[str] = set()
        while dirs:
            directory = os.path.normpath(dirs.pop())
            if directory in entered:
                continue
            entered.add(directory)
            lines = make(root, printer, [*common, f"obj={directory}"])
            objects = lines.get("built-in", []) + lines.get("module", [])
            built.update(os.path.normpath(o) for o in objects if o.endswith(".o"))
            dirs += [d for d in lines.get("subdirs", []) if (root / d).is_dir()]
        return built, entered


def top_printer(root: Path) -> str:
    """The top Makefile's own assignments of the directory lists, in its order, with the arch Makefile included
    where the build (not the configuration targets' branch, which includes it earlier) includes it."""
    include = "include arch/$(SRCARCH)/Makefile"
    kept: list[str] = []
    text = re.sub(r"\\\n", " ", (root / "Makefile").read_text())
    for line in text.splitlines():
        if line.strip() == include:
            kept = [k for k in kept if k != include] + [include]
        elif line.startswith("vmlinux-dirs += samples"):  # under the top Makefile's `ifdef CONFIG_SAMPLES`
            kept += ["ifdef CONFIG_SAMPLES", line, "endif"]
        elif TOP_NAMES.match(line):
            kept.append(line.split("#")[0])
    lines = ["include $(K3_CONFIG)", "srctree := .", "include scripts/Kbuild.include", *SIMPLE, *kept]
    return "\n".join([*lines, "$(info K3 dirs $(vmlinux-dirs))", "$(info K3 BITS $(BITS))", "k3-print: ;@:", ""])


def make(root: Path, makefile: Path, variables: list[str]) -> dict[str, list[str]]:
    """One make run of a printer, its ``K3 <what> <words>`` lines by what."""
    done = subprocess.run(
        ["make", "-s", "-r", "-R", "--no-print-directory", "-f", str(makefile), *variables, "k3-print"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=MAKE_TIMEOUT,
    )
    if done.returncode != 0:
        print(f"make {' '.join(variables[-1:])} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
    out: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("K3 "):
            what, *words = line[3:].split()
            out.setdefault(what, []).extend(words)
    return out


QUICK = {
    "Makefile": (
        "init-y := init/\ndrivers-y := drivers/\ncore-y := kernel/\ninclude arch/$(SRCARCH)/Makefile\n"
        "core-y += mm/\nvmlinux-dirs := $(patsubst %/,%,$(filter %/, $(init-y) $(core-y) $(drivers-y)))\n"
    ),
    "arch/x86/Makefile": "BITS := 64\nexport BITS\ncore-y += arch/x86/\ndrivers-$(CONFIG_PCI) += arch/x86/pci/\n",
    "arch/x86/Kbuild": "obj-y += kernel/\n",
    "arch/x86/kernel/Makefile": "obj-y += setup.o head_$(BITS).o\n",
    "arch/x86/pci/Makefile": "obj-y += pci.o\n",
    "init/Makefile": "obj-y := main.o\n",
    "kernel/Makefile": "obj-y += fork.o\nobj-$(CONFIG_KEXEC) += kexec.o\nobj-$(CONFIG_BPF) += bpf/\n",
    "kernel/bpf/Makefile": "obj-y += core.o\n",
    "mm/Makefile": "ifdef CONFIG_MMU\nobj-y += memory.o\nelse\nobj-y += nommu.o\nendif\nlib-y += util.o\n",
    "drivers/Makefile": "obj-$(CONFIG_NET) += net/\n",
    "drivers/net/Makefile": "obj-$(CONFIG_E1000) += e1000.o\ne1000-y := main.o hw.o\ne1000-$(CONFIG_PM) += pm.o\n",
    # kbuild's own computation of the lists (scripts/Makefile.lib of Linux 4.19, the lines the printer reads)
    "scripts/Kbuild.include": "",
    "scripts/Makefile.lib": (
        "obj-m := $(filter-out $(obj-y),$(obj-m))\nlib-y := $(filter-out $(obj-y), $(sort $(lib-y) $(lib-m)))\n"
        "__subdir-y := $(patsubst %/,%,$(filter %/, $(obj-y)))\nsubdir-y += $(__subdir-y)\n"
        "__subdir-m := $(patsubst %/,%,$(filter %/, $(obj-m)))\nsubdir-m += $(__subdir-m)\n"
        "obj-y := $(patsubst %/, %/built-in.a, $(obj-y))\nobj-m := $(filter-out %/, $(obj-m))\n"
        "subdir-ym := $(sort $(subdir-y) $(subdir-m))\n"
        "real-obj-y := $(foreach m, $(obj-y), $(if $(strip $($(m:.o=-objs)) $($(m:.o=-y))),"
        "$($(m:.o=-objs)) $($(m:.o=-y)),$(m)))\n"
        "real-obj-m := $(foreach m, $(obj-m), $(if $(strip $($(m:.o=-objs)) $($(m:.o=-y)) $($(m:.o=-m))),"
        "$($(m:.o=-objs)) $($(m:.o=-y)) $($(m:.o=-m)),$(m)))\n"
        "extra-y := $(addprefix $(obj)/,$(extra-y))\nobj-m := $(addprefix $(obj)/,$(obj-m))\n"
        "lib-y := $(addprefix $(obj)/,$(lib-y))\nreal-obj-y := $(addprefix $(obj)/,$(real-obj-y))\n"
        "real-obj-m := $(addprefix $(obj)/,$(real-obj-m))\nsubdir-ym := $(addprefix $(obj)/,$(subdir-ym))\n"
    ),
    "quick.config": (
        "# Linux/x86 quick Kernel Configuration\nCONFIG_MMU=y\nCONFIG_NET=y\nCONFIG_E1000=m\nCONFIG_KEXEC=y\n"
    ),
}
QUICK_SOURCES = [
    "arch/x86/kernel/setup.c", "arch/x86/kernel/head_64.S", "arch/x86/pci/pci.c", "arch/arm/kernel/setup.c",
    "init/main.c", "kernel/fork.c", "kernel/kexec.c", "kernel/bpf/core.c", "mm/memory.c", "mm/nommu.c",
    "mm/util.c", "drivers/net/main.c", "drivers/net/hw.c", "drivers/net/pm.c", "tools/perf/perf.c",
]  # fmt: skip


def quick_tree(root: Path) -> Path:
    """A small kernel-like tree with each construct the comparison meets."""
    for name, text in QUICK.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for name in QUICK_SOURCES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("int f(void)\n{\n\treturn 0;\n}\n")
    return root


if __name__ == "__main__":
    sys.exit(main())
