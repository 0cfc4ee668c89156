"""Which source files of a kernel tree one configuration builds, read the way kbuild walks the tree.

kbuild starts at the root Makefile (which includes ``arch/$(SRCARCH)/Makefile``): its ``init-y``, ``core-y``,
``drivers-y``, ``net-y``, ``libs-y`` and ``virt-y`` name the directories it enters (``vmlinux-dirs``). In each
directory it reads ``Kbuild`` (else ``Makefile``) with the configuration's values and the variables the top level
exported, then ``scripts/Makefile.lib`` turns the lists into objects: ``obj-m`` without what ``obj-y`` has,
``lib-y``, ``dir/`` entries into subdirectories, composite objects (``foo-objs``, ``foo-y``, ``foo-m``) into their
parts. The same steps are done here in Python (``k3lsp.kbuild.make``), so the state of a file comes with the rule
that decided it. A reading is kept per tree, architecture and ``.config`` content (:func:`read`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.kbuild.config import Config
from k3lsp.kbuild.make import Assignment, Evaluation, Reader, Variable
from k3lsp.kbuild.state import BUILT_IN, MODULE, Kind, State

TOP_LISTS = ("init", "core", "drivers", "net", "libs", "virt")
SOURCES = (".c", ".S")
_CACHE: dict[tuple[str, str, str], Reading] = {}


@dataclass
class Reading:
    """One configuration's reading of a tree: every object kbuild builds (by path, ``drivers/net/foo.o``), every
    directory it enters, and why each object or directory it does not build is left out."""

    root: Path
    config: Config
    arch: str
    objects: dict[str, State] = field(default_factory=dict)
    entered: dict[str, State] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    unsure: list[str] = field(default_factory=list)

    def file(self, path: str | Path) -> State:
        """The state of one file, named relative to the tree or absolute inside it."""
        relative = _relative(self.root, path)
        if relative is None:
            return State(Kind.UNKNOWN, f"{path} is outside the kernel tree {self.root}")
        suffix = os.path.splitext(relative)[1]
        if suffix == ".h":
            return State(Kind.UNKNOWN, "a header: built wherever a built file includes it")
        if suffix not in SOURCES:
            return State(Kind.UNKNOWN, f"not a source kbuild compiles ({suffix or 'no suffix'})")
        obj = relative[: -len(suffix)] + ".o"
        if obj in self.objects:
            return self.objects[obj]
        if obj in self.left_out:
            return State(Kind.NOT_BUILT, self.left_out[obj])
        return self._directory(os.path.dirname(relative), os.path.basename(obj))

    def _directory(self, directory: str, obj: str) -> State:
        """The state of a file no rule names: its directory's, when kbuild does not enter it."""
        if directory in self.entered:
            return State(
                Kind.UNKNOWN,
                f"no rule of {_kbuild_file(self.root, directory)} names {obj}: another file may #include it, "
                "or a rule of its own builds it",
            )
        parts = directory.split("/")
        if len(parts) > 1 and parts[0] == "arch" and parts[1] != self.arch:
            return State(
                Kind.NOT_BUILT, f"arch/{parts[1]}/ is another architecture's (the configuration is {self.arch})"
            )
        while directory:
            if directory in self.left_out:
                return State(Kind.NOT_BUILT, f"{directory}/ is not entered: {self.left_out[directory]}")
            parent = os.path.dirname(directory)
            if parent in self.entered or not parent:
                where = _kbuild_file(self.root, parent) if parent else "the top Makefile"
                return State(Kind.UNKNOWN, f"no rule of {where} enters {directory}/")
            directory = parent
        return State(Kind.UNKNOWN, "no rule of the top Makefile builds it")


def read(root: Path, config: Config, arch: str | None = None) -> Reading:
    """The reading of ``root`` under ``config``: kept per tree, architecture and ``.config`` content, so the
    editor, an audit and a review ask it once."""
    arch = arch or architecture(root, config)
    key = (str(root.resolve()), config.digest, arch)
    if key not in _CACHE:
        _CACHE[key] = _walk(root.resolve(), config, arch)
    return _CACHE[key]


def architecture(root: Path, config: Config) -> str:
    """The source architecture a ``.config`` is for: the ``# Linux/<arch>`` line kconfig writes at its top, else
    the one whose own symbol it sets (``CONFIG_X86``, ``CONFIG_ARM64``); ``x86`` when it says neither."""
    if config.arch and (root / "arch" / config.arch).is_dir():
        return config.arch
    arches = sorted(p.name for p in (root / "arch").glob("*/") if p.is_dir())
    return next((a for a in arches if config.values.get(f"CONFIG_{a.upper()}") == "y"), "x86")


def _walk(root: Path, config: Config, arch: str) -> Reading:
    """kbuild's walk: the top Makefile (and ``scripts/Kbuild.include``, read once and copied into every
    directory's start), then each directory it enters; a directory reached for a module and then built in is
    read again, as built in."""
    reading = Reading(root, config, arch)
    base = _environment(root, config, arch)
    library = Evaluation(root, dict(base))
    Reader(library).read(Path("scripts/Kbuild.include"))
    top = Evaluation(root, {name: _copy(var) for name, var in library.variables.items()})
    Reader(top).read(Path("Makefile"))
    reading.unsure += top.unsure
    inherited = {name: Variable(text, simple=True, exported=True) for name, text in top.exported().items()}
    for assignment in top.assignments:
        _left_out(reading, "", assignment, TOP_LISTS)
    queue = [(d.rstrip("/"), BUILT_IN) for d in _top_dirs(top)]
    while queue:
        directory, state = queue.pop()
        if directory in reading.entered and (reading.entered[directory] == BUILT_IN or state == MODULE):
            continue
        reading.entered[directory] = state
        variables = {name: _copy(var) for name, var in [*library.variables.items(), *inherited.items()]}
        queue += _read_directory(reading, Evaluation(root, variables), directory, state)
    for obj in reading.objects:
        reading.left_out.pop(obj, None)
    for directory in reading.entered:
        reading.left_out.pop(directory, None)
    return reading


def _environment(root: Path, config: Config, arch: str) -> dict[str, Variable]:
    """What every Makefile starts with: the configuration's values (as ``include/config/auto.conf`` gives them)
    and the variables the top Makefile sets before it includes anything."""
    base = {name: Variable(value, simple=True) for name, value in config.values.items()}
    for name, value in (("srctree", "."), ("objtree", "."), ("ARCH", arch), ("SRCARCH", arch)):
        base[name] = Variable(value, simple=True, exported=True)
    base["CONFIG_SHELL"] = Variable("sh", simple=True, exported=True)
    return base


def _top_dirs(top: Evaluation) -> list[str]:
    """The directories the top Makefile enters: its ``vmlinux-dirs`` (and the lists it is made of when a tree's
    Makefile has no such variable)."""
    dirs = top.words("vmlinux-dirs")
    if not dirs:
        dirs = [w for name in TOP_LISTS for s in ("y", "m") for w in top.words(f"{name}-{s}") if w.endswith("/")]
    return [d for d in dirs if (top.root / d).is_dir()]


def _read_directory(reading: Reading, ev: Evaluation, directory: str, state: State) -> list[tuple[str, State]]:
    """Reads one directory as ``scripts/Makefile.build`` and ``Makefile.lib`` do; returns the subdirectories to
    enter, each with the state its objects get."""
    for name in ("obj", "src"):
        ev.variables[name] = Variable(directory, simple=True)
    kbuild = _kbuild_file(reading.root, directory)
    if not (reading.root / kbuild).is_file():
        reading.unsure.append(f"{directory}/ has no Kbuild or Makefile")
        return []
    Reader(ev).read(Path(kbuild))
    reading.unsure += [f"{kbuild}: {u}" for u in ev.unsure]
    obj_y = ev.words("obj-y")
    obj_m = [w for w in ev.words("obj-m") if w not in obj_y]
    lib_y = [w for w in sorted(set(ev.words("lib-y") + ev.words("lib-m"))) if w not in obj_y]
    sub_y = ev.words("subdir-y") + [w.rstrip("/") for w in obj_y if w.endswith("/")]
    sub_m = ev.words("subdir-m") + [w.rstrip("/") for w in obj_m if w.endswith("/")]
    for obj in [*_parts(ev, obj_y, ("-objs", "-y")), *lib_y, *(w for w in ev.words("extra-y") if w.endswith(".o"))]:
        _mark(reading, _join(directory, obj), state)
    for obj in _parts(ev, obj_m, ("-objs", "-y", "-m")):
        _mark(reading, _join(directory, obj), MODULE)
    for assignment in ev.assignments:
        _left_out(reading, directory, assignment, ("obj", "lib", "subdir"))
    _composites_left_out(reading, directory, ev)
    return [(_join(directory, d), state) for d in sub_y] + [(_join(directory, d), MODULE) for d in sub_m]


def _mark(reading: Reading, obj: str, state: State) -> None:
    """An object built: built in wins over a module (one directory may be reached both ways)."""
    if reading.objects.get(obj) != BUILT_IN:
        reading.objects[obj] = state


def _parts(ev: Evaluation, objects: list[str], suffixes: tuple[str, ...]) -> list[str]:
    """Makefile.lib's ``real-obj-*``: each composite object replaced by its parts, directories left out."""
    out: list[str] = []
    for obj in objects:
        if obj.endswith("/"):
            continue
        parts = [w for s in suffixes for w in ev.words(obj[:-2] + s)] if obj.endswith(".o") else []
        out += parts or [obj]
    return out


def _left_out(reading: Reading, directory: str, assignment: Assignment, lists: tuple[str, ...]) -> None:
    """Records why the words of an assignment that did not add to a built list are left out: the conditional that
    skipped it, or the symbol that made its list ``obj-`` (or a composite's ``foo-``) rather than ``obj-y``."""
    head, _, tail = assignment.name.rpartition("-")
    effective = tail in ("y", "m", "objs") or (head not in lists and "CONFIG_" not in assignment.written)
    if effective and not assignment.skipped:
        return
    why = assignment.skipped or (
        f"{assignment.path}:{assignment.line}: `{assignment.written}` ({_said(reading.config, assignment.written)})"
    )
    for word in assignment.words:
        if word.endswith((".o", "/")) and not word.startswith("-"):
            reading.left_out.setdefault(_join(directory, word).rstrip("/"), why)


def _composites_left_out(reading: Reading, directory: str, ev: Evaluation) -> None:
    """Why each part of a composite object that is not built is left out (``foo-y += a.o`` while ``foo.o`` is in
    no built list)."""
    for assignment in ev.assignments:
        composite, _, tail = assignment.name.rpartition("-")
        if tail not in ("y", "m", "objs") or composite in ("obj", "lib", "subdir", "extra") or not composite:
            continue
        whole = _join(directory, composite + ".o")
        if whole in reading.objects:
            continue
        because = reading.left_out.get(whole, f"no rule of {_kbuild_file(reading.root, directory)} builds it")
        for word in assignment.words:
            reading.left_out.setdefault(_join(directory, word), f"a part of {whole}, which is not built: {because}")


def _said(config: Config, written: str) -> str:
    symbols = sorted(set(re.findall(r"CONFIG_\w+", written)))
    return ", ".join(config.said(s) for s in symbols) or "not a list kbuild builds"


def _kbuild_file(root: Path, directory: str) -> str:
    kbuild = os.path.join(directory, "Kbuild")
    return kbuild if (root / kbuild).is_file() else os.path.join(directory, "Makefile")


def _join(directory: str, word: str) -> str:
    return os.path.normpath(os.path.join(directory, word)) + ("/" if word.endswith("/") else "")


def _copy(var: Variable) -> Variable:
    return Variable(var.text, var.simple, var.exported)


def _relative(root: Path, path: str | Path) -> str | None:
    path = Path(path)
    if not path.is_absolute():
        return os.path.normpath(path)
    try:
        return os.path.normpath(path.resolve().relative_to(root))
    except ValueError:
        return None
