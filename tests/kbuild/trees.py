"""Small kernel-like trees the tests write (tests/kbuild's readers, and the kconfig setting through every front
end): what kbuild's walk needs to find a kernel tree (Kconfig, the top Makefile, arch/x86/), a .config, and the
test's own Makefiles and sources."""

from __future__ import annotations

from pathlib import Path


def layout(dirs: str, config: str) -> dict[str, str]:
    """The top of a tree whose Makefile enters ``dirs`` (``kernel/ lib/``), with a .config of ``config``'s lines."""
    return {
        "Kconfig": "",
        "Makefile": f"core-y := {dirs}\nvmlinux-dirs := $(patsubst %/,%,$(core-y))\n",
        "arch/x86/Makefile": "",
        ".config": "# Linux/x86 test Kernel Configuration\n" + config,
    }


def write(root: Path, files: dict[str, str]) -> Path:
    """``files`` (path -> text) written under ``root``, which is returned."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root
