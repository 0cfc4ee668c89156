"""One analyzer alert, as every witness reports it: tool, rule, CWE, line, message. Nothing else.

An analyzer's output carries more than this (source excerpts, fix-its, paths through headers, event notes),
and some of it quotes lines of files the alert does not belong to (a header outside the workspace, a file a
hostile ``-include`` named). An alert keeps only the tool's own words about one line of the analyzed file:
its message (one line, sanitised, bounded) and where. That is what the editor shows and what the model is
told; a quoted line never reaches the daemon.

The CWE is the tool's own when it gives one (cppcheck's ``cwe`` attribute, GCC's ``metadata.cwe``); the clang
analyzer, sparse and Coccinelle give none, so their rules map to one here where the mapping is clear
(``RULE_CWES``); the rest have none (the scorer and the model may still match them by line).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from k3lsp.wire import sanitize

MAX_MESSAGE_CHARS = 300  # an analyzer's message is one sentence; anything longer is a quote
MAX_RULE_CHARS = 100

# Rules of tools that give no CWE themselves, mapped to the CWE their check is about.
RULE_CWES: dict[str, int] = {
    # clang static analyzer checkers (clang --analyze)
    "core.NullDereference": 476,
    "core.DivideZero": 369,
    "core.UndefinedBinaryOperatorResult": 457,
    "core.uninitialized.Assign": 457,
    "core.uninitialized.Branch": 457,
    "core.uninitialized.UndefReturn": 457,
    "core.uninitialized.ArraySubscript": 457,
    "core.CallAndMessage": 457,
    "core.StackAddressEscape": 562,
    "core.NonNullParamChecker": 476,
    "core.VLASize": 129,
    "core.BitwiseShift": 1335,
    "alpha.security.ArrayBoundV2": 119,
    "alpha.security.ReturnPtrRange": 466,
    "alpha.unix.cstring.OutOfBounds": 119,
    "security.insecureAPI.gets": 242,
    "security.insecureAPI.strcpy": 120,
    "security.insecureAPI.rand": 338,
    "security.insecureAPI.vfork": 662,
    "security.insecureAPI.mktemp": 377,
    "security.insecureAPI.mkstemp": 377,
    "security.FloatLoopCounter": 1339,
    "unix.Malloc": 401,  # its messages say which: use after free, double free or a leak (MESSAGE_CWES)
    "unix.MallocSizeof": 131,
    "unix.MismatchedDeallocator": 762,
    "unix.cstring.NullArg": 476,
    "unix.cstring.BadSizeArg": 131,
    "unix.API": 687,
    "deadcode.DeadStores": 563,
    "optin.portability.UnixAPI": 687,
    # sparse (its warnings have no ids: the adapter names them by the start of their text)
    "sparse.address-space": 704,
    "sparse.cast-truncate": 197,
    "sparse.context": 667,
    "sparse.past-end": 119,
    "sparse.null-pointer": 476,
    # our Coccinelle rules (k3lsp/witnesses/cocci/)
    "coccinelle.double-free": 415,
    "coccinelle.unchecked-alloc": 690,
}
# A rule whose checker covers several weaknesses: the message says which one.
MESSAGE_CWES: dict[str, tuple[tuple[str, int], ...]] = {
    "unix.Malloc": (("free released", 415), ("released memory", 416), ("freed", 416), ("leak", 401)),
}


def cwe_of(rule: str, message: str) -> int | None:
    """The CWE of a rule that comes without one (clang, sparse, Coccinelle); None when there is no clear one."""
    for words, cwe in MESSAGE_CWES.get(rule, ()):
        if words in message.lower():
            return cwe
    return RULE_CWES.get(rule)


@dataclass(frozen=True)
class Alert:
    """One alert on one line of the analyzed file. ``line`` is 1-based in the file; ``level`` is the tool's
    own word for how bad (cppcheck's severity, ``warning`` for a compiler), used to leave out style and
    information alerts the way the CASTLE authors did."""

    tool: str
    rule: str
    line: int
    message: str
    cwe: int | None = None
    level: str = "warning"

    @classmethod
    def of(cls, tool: str, rule: str, line: int, message: str, cwe: int | None, level: str = "warning") -> Alert:
        """An alert from a tool's raw words: one sanitised line each, bounded, the CWE mapped when missing."""
        text = sanitize.line(message).strip()
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 1] + "…"
        rule = sanitize.line(rule).strip()[:MAX_RULE_CHARS] or "alert"
        mapped = cwe if cwe is not None and 0 < cwe < 100_000 else cwe_of(rule, text)
        return cls(tool, rule, line, text, mapped, sanitize.line(level).strip()[:20] or "warning")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Alert | None:
        """An alert as the witness cache stored it; None for anything else (a row of another version)."""
        if not isinstance(raw, dict):
            return None
        try:
            line, cwe = raw["line"], raw.get("cwe")
            if not isinstance(line, int) or line < 1 or not (cwe is None or isinstance(cwe, int)):
                return None
            return cls.of(str(raw["tool"]), str(raw["rule"]), line, str(raw["message"]), cwe, str(raw["level"]))
        except KeyError:
            return None
