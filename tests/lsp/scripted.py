"""The scripted daemon answers and the C workspace the LSP tests audit: findings known in advance."""

from __future__ import annotations

import functools
from pathlib import Path

from lsprotocol import types as lsp

from tests.support import kimi

DEMO_C = """\
#include <string.h>

struct msg {
\tchar buf[16];
};

static int copy_msg(struct msg *m, const char *src, int n)
{
\tmemcpy(m->buf, src, n);
\treturn 0;
}

static int get_slot(int *slots, int idx)
{
\treturn slots[idx];
}
"""
COPY_MSG_LINE = 8  # 0-based file line of the memcpy (line 3 of the unit copy_msg, which starts at line 6)
GET_SLOT_LINE = 14  # `return slots[idx];` (line 3 of get_slot, starting at line 12)

# A unit that keeps the daemon busy for seconds: a forced generation with a period too long for the loop guard.
SLOW_C = """\
static int slow_unit(int a)
{
\treturn a;
}
"""
LONG_PERIOD = " ".join(f"w{i}" for i in range(40)) + " "

# The model tries to read outside the workspace, then inside it, then reports nothing.
LEAKY_C = """\
static int leaky(void)
{
\treturn 0;
}
"""

COPY_FINDING = kimi.finding(
    cwe=787,
    severity="high",
    title="memcpy overflows buf",
    message="n comes from the caller and is not checked against sizeof(m->buf)",
    start_line=3,
    end_line=3,
    confidence=0.9,
    trace=[{"line": 1, "note": "n is caller-controlled"}, {"line": 3, "note": "copied without a bound"}],
    fix={"start_line": 3, "end_line": 3, "replacement": "\tmemcpy(m->buf, src, min_t(int, n, sizeof(m->buf)));"},
)
SLOT_FINDING = kimi.finding(
    cwe=129, severity="medium", title="unchecked index", message="idx is not bounded", start_line=3, end_line=3
)

COPY_WHY = "src and n both come from the caller; buf holds 16 bytes and nothing compares n with that."


@functools.cache
def _script() -> list[dict]:
    """The daemon's --script: model turns, written with the checkpoint's tokenizer code (transformers)."""
    return [
        {"unit": "copy_msg", "turns": [kimi.turn(("report_finding", COPY_FINDING), reasoning=COPY_WHY)]},
        {"unit": "get_slot", "turns": [kimi.turn(("report_finding", SLOT_FINDING))]},
        {"unit": "slow_unit", "turns": [{"repeat": LONG_PERIOD, "tokens": 3000}]},
        {
            "unit": "leaky",
            "turns": [
                kimi.turn(("read_lines", {"path": "../outside/secret.c", "start": 1, "end": 5})),
                kimi.turn(("read_lines", {"path": "demo.c", "start": 1, "end": 2})),
                kimi.turn(content="nothing to report"),
            ],
        },
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


def __getattr__(name: str) -> object:
    """``SCRIPT`` is built on first use, so the logic tier imports this module where the backend is not installed."""
    if name == "SCRIPT":
        return _script()
    raise AttributeError(name)


# The same answers from the fake daemon (tests/support/fake_daemon.py), for the tier without a daemon.
FAKE = {
    "units": {
        "copy_msg": {"findings": [COPY_FINDING | {"reasoning": COPY_WHY}]},
        "get_slot": {"findings": [SLOT_FINDING]},
        "slow_unit": {"hold": True},
    },
    "explain": ["n is copied ", "without a bound."],
}

DAEMON_ARGS = ["--max-tokens", "4000"]


def lines_and_codes(diagnostics: list[lsp.Diagnostic]) -> list[tuple[int, str]]:
    return sorted((d.range.start.line, d.code) for d in diagnostics)


def demo_copy_diagnostic(diagnostics: list[lsp.Diagnostic]) -> lsp.Diagnostic:
    """Check demo.c's two findings as the editor shows them (lines, codes, the memcpy's range from after the tab to
    the end of its line, severity, its trace as related locations) and return the memcpy's, for more checks."""
    assert lines_and_codes(diagnostics) == [(COPY_MSG_LINE, "CWE-787"), (GET_SLOT_LINE, "CWE-129")], diagnostics
    copy = next(d for d in diagnostics if d.code == "CWE-787")
    line = DEMO_C.split("\n")[COPY_MSG_LINE]
    assert copy.range == lsp.Range(lsp.Position(COPY_MSG_LINE, 1), lsp.Position(COPY_MSG_LINE, len(line)))
    assert copy.source == "k3-audit" and copy.severity == lsp.DiagnosticSeverity.Error
    assert [r.location.range.start.line for r in copy.related_information] == [6, 8]
    return copy


def workspace(tmp: Path) -> Path:
    """A workspace folder with the demo files, next to a secret the model must not read."""
    root = tmp / "ws"
    root.mkdir()
    (root / "demo.c").write_text(DEMO_C)
    (root / "slow.c").write_text(SLOW_C)
    (root / "leaky.c").write_text(LEAKY_C)
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.c").write_text("int SECRET_TOKEN_42;\n")
    return root
