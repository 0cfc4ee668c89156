"""Whether a file is C++: by what it says, not by its extension (XNU's ``IOKit/*.h`` are C++ headers).

A C++ header split as C is one long misread unit (a class body is not a function); split with the C++
grammar, its inline methods are units and its classes context. The signs are declarations C cannot
write, looked for on the normalised text (``kernelc.normalise``: comments and literals blanked, so a
``class Foo {`` in a comment does not count): a class or namespace definition, a template, an access
specifier, an out-of-line member definition (``A::f(``), a constructor's member initialisers, or ``extern "C++"`` (read on the original text,
since the normalised one has no string contents).
"""

from __future__ import annotations

import re

_SIGNS = re.compile(
    rb"^[ \t]*(?:"
    rb"template[ \t]*<"
    rb"|namespace(?:[ \t]+[A-Za-z_][\w:]*)?[ \t\n]*\{"
    rb"|class[ \t]+(?:[A-Z_][A-Z0-9_]*[ \t]+)*[A-Za-z_]\w*(?:[ \t]+final)?[ \t\n]*[:{]"
    rb"|struct[ \t]+[A-Za-z_]\w*[ \t\n]*:[ \t\n]*(?:public|protected|private|virtual)\b"
    rb"|(?:public|protected|private)[ \t]*:(?!:)"
    rb")",
    re.M,
)
# A constructor's member initialisers, `X(int a) : fA(a), fB(0) {` (also inside `#ifdef __cplusplus` in a C header).
_INITIALISERS = re.compile(rb"\)\s*:\s*[A-Za-z_]\w*\s*\([^();{}]*\)\s*(?:,\s*[A-Za-z_]\w*\s*\([^();{}]*\)\s*)*\{")
_MEMBER = re.compile(rb"::~?[A-Za-z_]\w*[ \t]*\(")
_EXTERN_CPP = re.compile(rb'extern[ \t]+"C\+\+"')


def is_cpp(normalised: bytes, original: bytes) -> bool:
    """Whether the file holds C++ declarations (see the module docstring)."""
    if _SIGNS.search(normalised) or _EXTERN_CPP.search(original) or _INITIALISERS.search(normalised):
        return True
    i = normalised.find(b"::")
    while i > 0:
        before = normalised[i - 1]
        if (before == 0x3E or chr(before).isalnum() or before == 0x5F) and _MEMBER.match(normalised, i):
            return True
        i = normalised.find(b"::", i + 2)
    return False
