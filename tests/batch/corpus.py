"""The C trees the batch tests audit and the scripted daemon answers for them: findings known in advance.

`tree(tmp)` writes a small project (a source with two flagged functions, a header with a low-severity one,
a clean library, a non-C file and an excluded build directory). `script()` makes the daemon report the
findings; `line_of` finds the expected file line from the text itself, so a wrong line mapping in the
tool cannot be mirrored by the test. `SLOW_SCRIPT` + `slow_tree` give units of a fixed token count for the
tests that need time to pass between units (interruption, several backends).
"""

from __future__ import annotations

from pathlib import Path

from tests.support import kimi

PARSE_C = """\
#include <string.h>
#include "proto.h"

struct pkt {
\tchar data[64];
\tint len;
};

/* Copies a header out of the receive buffer. */
static int parse_header(struct pkt *p, const char *in, int n)
{
\tmemcpy(p->data, in, n); /* größe ≠ 😀 */
\tp->len = n;
\treturn 0;
}

int lookup(int *table, int i)
{
\treturn table[i];
}
"""
PROTO_H = """\
#ifndef PROTO_H
#define PROTO_H

static inline int proto_version(void)
{
\tint v;
\treturn v;
}

#endif
"""
UTIL_C = """\
int add(int a, int b)
{
\treturn a + b;
}

int twice(int a)
{
\treturn add(a, a);
}
"""
FIX_TEXT = "\tmemcpy(p->data, in, min_t(int, n, sizeof(p->data)));"

MEMCPY = kimi.finding(
    cwe=787, severity="high", title="memcpy overflows data", message="n is not checked against sizeof(p->data)",
    start_line=3, end_line=3, confidence=0.9,
    trace=[{"line": 1, "note": "n comes from the caller"}, {"line": 3, "note": "copied without a bound"}],
    fix={"start_line": 3, "end_line": 3, "replacement": FIX_TEXT},
)  # fmt: skip
INDEX = kimi.finding(
    cwe=125, severity="medium", title="unchecked index", message="i is not bounded", start_line=3, end_line=3,
    trace=[],
)  # fmt: skip
UNINIT = kimi.finding(
    cwe=457, severity="low", title="v is read uninitialised", message="", start_line=3, end_line=4,
    trace=[{"line": 3, "note": "declared without a value"}, {"line": 4, "note": "returned"}],
)  # fmt: skip

MEMCPY_WHY = "n is the caller's and data holds 64 bytes; the copy is not bounded by it."


def script() -> list[dict]:
    """Built when a daemon starts, not at import: typed tool calls need transformers (the backend's)."""
    return [
        {"unit": "parse_header", "turns": [kimi.turn(("report_finding", MEMCPY), reasoning=MEMCPY_WHY)]},
        {"unit": "lookup", "turns": [kimi.turn(("report_finding", INDEX))]},
        {"unit": "proto_version", "turns": [kimi.turn(("report_finding", UNINIT))]},
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


DAEMON_ARGS = ["--max-tokens", "4000"]
UNITS = 5  # parse_header, lookup, proto_version, add, twice


def tree(tmp: Path) -> Path:
    root = tmp / "proj"
    for rel, text in {
        "src/net/parse.c": PARSE_C,
        "src/net/proto.h": PROTO_H,
        "lib/util.c": UTIL_C,
        "lib/NOTES.txt": "int not_c(void) { return 0; }\n",
        "build/generated.c": "int generated(void)\n{\n\treturn 1;\n}\n",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the only line containing ``needle``."""
    hits = [i for i, line in enumerate(text.split("\n"), 1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def end_column(text: str, line: int) -> int:
    """SARIF's exclusive end column of a whole line, in UTF-16 code units (the emoji above counts 2)."""
    return len(text.split("\n")[line - 1].encode("utf-16-le")) // 2 + 1


# --- units that take a fixed time --------------------------------------------------------------------------

# 40 distinct words: a period far longer than the loop guard looks for, so every unit generates all its tokens.
LONG_PERIOD = " ".join(f"w{i}" for i in range(40)) + " "
SLOW_TOKENS = 160
SLOW_SCRIPT = [{"unit": "*", "turns": [{"repeat": LONG_PERIOD, "tokens": SLOW_TOKENS}]}]


def slow_tree(tmp: Path, files: int, per_file: int = 1) -> Path:
    """``files`` C files of ``per_file`` distinct functions each: every unit is new to the cache."""
    root = tmp / "slow"
    root.mkdir()
    for f in range(files):
        body = "\n".join(f"int f{f}_{k}(int a)\n{{\n\treturn a + {f * 100 + k};\n}}\n" for k in range(per_file))
        (root / f"m{f:02d}.c").write_text(body)
    return root
