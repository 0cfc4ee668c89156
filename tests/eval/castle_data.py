"""Small datasets in the CASTLE format, written for these tests (not copied from CASTLE-C250), and the scripted
answers that make a daemon an oracle (or a noisy oracle) for them.

Every function name is unique across the programs: the daemon's ``--script`` answers per unit name. Line numbers
are found in the code by searching for a line's text (``line_of``), never through the splitter under test.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

from tests.support import kimi

CWES = {
    "22": {"name": "Path Traversal", "parents": [{"668": "Exposure"}, {"706": "Name"}], "children": [{"23": "Rel"}]},
    "787": {"name": "OOB write", "parents": [{"119": "Bounds"}], "children": [{"121": "Stack"}, {"122": "Heap"}]},
    "416": {"name": "Use After Free", "parents": [{"672": "After release"}], "children": []},
    "476": {"name": "NULL deref", "parents": [{"754": "Unusual conditions"}], "children": []},
    "835": {"name": "Infinite loop", "parents": [{"834": "Excessive iteration"}], "children": []},
}  # fmt: skip
PROMPT_MARKER = "PROMPT-TEXT-THE-HARNESS-NEVER-READS-4711"  # the dataset's own LLM prompt: must never reach the model

SERVE_FILE = """\
#include <stdio.h>

int serve_file(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/var/www/%s", name);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    fclose(f);
    return 0;
}
"""
COPY_NAME = """\
#include <string.h>

void copy_name(char *dst, const char *src)
{
    char buf[8];
    strcpy(buf, src);
    strcpy(dst, buf);
}
"""
DROP_SESSION = """\
#include <stdlib.h>

struct session { int id; };

int drop_session(struct session *s)
{
    free(s);
    return s->id;
}
"""
SERVE_CHECKED = """\
#include <stdio.h>
#include <string.h>

int serve_checked(const char *name)
{
    if (strstr(name, ".."))
        return 1;
    printf("%s\\n", name);
    return 0;
}
"""
COPY_BOUNDED = """\
#include <string.h>

void copy_bounded(char *dst, size_t n, const char *src)
{
    strncpy(dst, src, n - 1);
    dst[n - 1] = 0;
}
"""
FIND_USER = """\
#include <stddef.h>

struct user { const char *name; };

static struct user *lookup_user(int id)
{
    return id > 0 ? NULL : NULL;
}

const char *find_user(int id)
{
    struct user *u = lookup_user(id);
    return u->name;
}
"""
SPIN_COUNT = """\
unsigned spin_count(unsigned n)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n; i += 0)
        k++;
    return k;
}
"""


@dataclass(frozen=True)
class Case:
    id: str
    cwe: int
    code: str
    function: str  # where the bug is (or, for a safe test, the function that the noisy script flags)
    bug: str | None  # the text of the labelled line; None: a safe test


def line_of(code: str, needle: str) -> int:
    """The 1-based line of the only line containing ``needle``."""
    hits = [i for i, line in enumerate(code.split("\n"), 1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def function_start(code: str, name: str) -> int:
    """The 1-based line of a function's header (the unit's first line)."""
    return line_of(code, f"{name}(")


# The test order matters: the Top-25 bonus follows the running TP total in dataset order.
CASES = (
    Case("22-1", 22, SERVE_FILE, "serve_file", 'FILE *f = fopen(path, "r");'),
    Case("787-1", 787, COPY_NAME, "copy_name", "strcpy(buf, src);"),
    Case("416-1", 416, DROP_SESSION, "drop_session", "return s->id;"),
    Case("22-2", 22, SERVE_CHECKED, "serve_checked", None),
    Case("787-2", 787, COPY_BOUNDED, "copy_bounded", None),
    Case("476-1", 476, FIND_USER, "find_user", "return u->name;"),
)
# Hand-computed from the rules (castle_score's docstring) for CASES in this order:
# the oracle finds the 4 vulnerable tests (TP 4) and says nothing on the 2 safe ones (TN 2); the Top-25 bonus
# counts from the first test on (a TP is counted at once): CWE-22 (index 4) 5, CWE-787 (index 1) 5, CWE-416
# (index 7) 5 - 7 // 5 = 4, CWE-22 5, CWE-787 5, CWE-476 (index 20) 5 - 20 // 5 = 1: 25.
ORACLE = {"tp": 4, "tn": 2, "fp": 0, "fn": 0, "bonus": 25, "score": 5 * 4 + 2 * 2 + 25}
# The noisy oracle adds one unrelated medium finding (CWE-561, a line that is no label) to every program and one
# low-severity one (dropped): each vulnerable test is a TP and an FP, each safe test an FP and no TN.
NOISY = {"tp": 4, "tn": 0, "fp": 6, "fn": 0, "bonus": 25, "score": 5 * 4 - 6 + 25}


def dataset(cases=CASES) -> dict:
    tests = []
    for c in cases:
        lines = [line_of(c.code, c.bug)] if c.bug else []
        tests.append(
            {
                "name": f"CASTLE-{c.id}.c",
                "id": c.id,
                "vulnerable": c.bug is not None,
                "cwe": c.cwe,
                "lines": lines,
                "description": f"DESCRIPTION-OF-{c.id}: the bug is on line {lines}",
                "code": c.code,
            }
        )
    cwes = copy.deepcopy(CWES)  # a test may break its own copy
    return {"dataset": "hand-made", "version": "t1", "tests": tests, "cwes": cwes, "prompt": PROMPT_MARKER}


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=1))
    return path


def unit_line(c: Case, needle: str) -> int:
    """A line of the program as the model numbers it: 1-based within its function."""
    return line_of(c.code, needle) - function_start(c.code, c.function) + 1


def _true_finding(c: Case) -> dict:
    line = unit_line(c, c.bug)
    return kimi.finding(cwe=c.cwe, severity="high", title=f"bug in {c.function}", start_line=line, end_line=line,
                        trace=[])  # fmt: skip


def _noise(severity: str) -> dict:
    """On the function's first line: never a labelled line in CASES."""
    return kimi.finding(cwe=561, severity=severity, title="noise", start_line=1, end_line=1, trace=[])


def oracle_script(cases=CASES) -> list[dict]:
    """Each vulnerable program's bug reported at its labelled line with its CWE; nothing anywhere else."""
    script = [{"unit": c.function, "turns": [kimi.turn(("report_finding", _true_finding(c)))]} for c in cases if c.bug]
    return [*script, {"unit": "*", "turns": [kimi.turn(content="no findings")]}]


def noisy_script(cases=CASES) -> list[dict]:
    """The oracle, plus one unrelated medium finding and one low one in every program."""
    script = []
    for c in cases:
        calls = [("report_finding", _true_finding(c))] if c.bug else []
        calls += [("report_finding", _noise("medium")), ("report_finding", _noise("low"))]
        script.append({"unit": c.function, "turns": [kimi.turn(*calls)]})
    return [*script, {"unit": "*", "turns": [kimi.turn(content="no findings")]}]
