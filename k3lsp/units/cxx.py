"""Whether a file is C++: by what it says, not by its extension (XNU's ``IOKit/*.h`` are C++ headers).

A C++ header split as C is one long misread unit (a class body is not a function); split with the C++
grammar, its inline methods are units and its classes context. The signs are declarations C cannot
write, looked for on the normalised text (``kernelc.normalise``: comments and literals blanked, so a
``class Foo {`` in a comment does not count): a class or namespace definition, a template, an access
specifier, an out-of-line member definition (``A::f(``), a constructor's member initialisers, or
``extern "C++"`` (read on the original text, since the normalised one has no string contents).
"""

from __future__ import annotations

import re

# Each sign starts with its keyword (so the regex engine skips to it); it counts at a line's start only.
_SIGNS = tuple(
    re.compile(sign)
    for sign in (
        rb"template[ \t]*<",
        rb"namespace(?:[ \t]+[A-Za-z_][\w:]*)?[ \t\n]*\{",
        rb"class[ \t]+(?:[A-Z_][A-Z0-9_]*[ \t]+)*[A-Za-z_]\w*(?:[ \t]+final)?[ \t\n]*[:{]",
        rb"public[ \t]*:(?!:)",
        rb"protected[ \t]*:(?!:)",
        rb"private[ \t]*:(?!:)",
    )
)
_STRUCT_BASE = re.compile(rb"struct[ \t]+[A-Za-z_]\w*[ \t\n]*:[ \t\n]*(?:public|protected|private|virtual)\b")
# A constructor's member initialisers, `X(int a) : fA(a), fB(0) {` (also inside `#ifdef __cplusplus` in a C header).
_INITIALISERS = re.compile(rb"\)\s*:\s*[A-Za-z_]\w*\s*\([^();{}]*\)\s*(?:,\s*[A-Za-z_]\w*\s*\([^();{}]*\)\s*)*\{")
_MEMBER = re.compile(rb"::~?[A-Za-z_]\w*[ \t]*\(")
_EXTERN_CPP = re.compile(rb'extern[ \t]+"C\+\+"')


def is_cpp(normalised: bytes, original: bytes) -> bool:
    """Whether the file holds C++ declarations (see the module docstring)."""
    for sign in _SIGNS:
        for m in sign.finditer(normalised):
            if not normalised[normalised.rfind(b"\n", 0, m.start()) + 1 : m.start()].strip(b" \t"):
                return True
    if _STRUCT_BASE.search(normalised) or _EXTERN_CPP.search(original) or _INITIALISERS.search(normalised):
        return True
    i = normalised.find(b"::")
    while i > 0:
        before = normalised[i - 1]
        if (before == 0x3E or chr(before).isalnum() or before == 0x5F) and _MEMBER.match(normalised, i):
            return True
        i = normalised.find(b"::", i + 2)
    return False
