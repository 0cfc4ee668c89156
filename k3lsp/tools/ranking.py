"""Which of a name's definitions ``find_definition`` shows first: the one the code most likely runs.

A kernel tree defines its common names many times: ``kmalloc`` in include/linux/slab.h, as a macro in
lib/decompress_unxz.c and as user-space shims under tools/; ``printk`` in kernel/printk/printk.c and as a
``return 0`` stub in include/linux/printk.h for kernels built without it. Ranked by path depth alone the model
first read the macro and the stub (issue 44). The order, each rule breaking the ties of the one before:

1. definitions before declarations (prototypes, extern variables);
2. the audited file's own definition (it is the one its code uses: decompress_unxz.c's ``kmalloc`` macro);
3. a real body before a stub: a function of at most ``STUB_LINES`` lines in a header;
4. anything before a macro (a function-like macro is more often a shim than the definition);
5. near the audited file first: a header it includes, then its directory, then its subsystem (the first
   path component: drivers/, fs/, tools/), then the rest;
6. the shallower path, then the path and line (deterministic).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

STUB_LINES = 5  # `static inline int printk(const char *s, ...)` / `{` / `return 0;` / `}` and an attribute line
HEADERS = (".h", ".hh", ".hpp", ".hxx")
MAX_INCLUDES = 256  # a file's first includes say what it uses; a generated file with thousands is not read on

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.M)


class Place(Protocol):
    """What ranking reads of a tag (``symbols.Tag``)."""

    path: str
    line: int
    end: int | None
    kind: str

    @property
    def declaration(self) -> bool: ...


@dataclass(frozen=True)
class Caller:
    """The file whose audit asks: its workspace-relative path and the files its ``#include`` lines name."""

    path: str
    includes: tuple[str, ...] = ()

    @classmethod
    def of(cls, path: str, text: str) -> Caller:
        """The caller ``path`` whose text is ``text`` (its includes read from it)."""
        names = [m.group(1).strip() for m, _ in zip(_INCLUDE.finditer(text), range(MAX_INCLUDES), strict=False)]
        here = posixpath.dirname(path)
        quoted = [posixpath.normpath(posixpath.join(here, name)) for name in names]  # "k3.h" beside the caller
        return cls(path, tuple(dict.fromkeys(names + quoted)))

    def nearness(self, path: str) -> int:
        """0: a header it includes; 1: its directory; 2: its subsystem; 3: elsewhere."""
        if any(path == name or path.endswith("/" + name) for name in self.includes):
            return 0
        if posixpath.dirname(path) == posixpath.dirname(self.path):
            return 1
        return 2 if path.split("/", 1)[0] == self.path.split("/", 1)[0] else 3


def ordered(places: Iterable[Place], caller: Caller | None = None) -> list[Place]:
    """The places in the order above."""
    return sorted(places, key=lambda p: _key(p, caller))


def _key(place: Place, caller: Caller | None) -> tuple:
    return (
        place.declaration,
        caller is None or place.path != caller.path,
        _stub(place),
        place.kind == "macro",
        caller.nearness(place.path) if caller is not None else 0,
        place.path.count("/"),
        place.path,
        place.line,
    )


def _stub(place: Place) -> bool:
    """A short function in a header: an inline that stands in for the real one in some configurations."""
    short = place.end is not None and place.end - place.line + 1 <= STUB_LINES
    return place.kind == "function" and short and place.path.endswith(HEADERS)
