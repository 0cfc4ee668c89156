"""What a candidate's audit came to (k3lsp/variants/hunt.py): its alert's verdict read back from the unit's findings
as the audit core folds the model's verdicts in (k3lsp/core/verdicts.py): confirmed as a finding of its own or
merged into the model's own finding on the line, refuted, or untriaged when the model said nothing or was unsure."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lsp.core import verdicts
from k3lsp.core.run import Target
from k3lsp.units import split
from k3lsp.variants.hunt import Candidate, alert, judge
from k3lsp.variants.origin import Origin
from tests.variants.tree import A_C

UNIT = next(u for u in split.split(A_C) if u.name == "a_grow")  # file lines 11-18; q used unchecked on 16
ORIGIN = Origin(Path("/ws"), Path("/ws/a.c"), 7, 7, 476, "high", "p is used unchecked", "", "f" * 32)
OWN = {"cwe": 476, "severity": "high", "title": "q may be NULL", "message": "kmalloc can fail", "start_line": 5,
       "end_line": 6, "trace": [{"line": 5, "note": "q"}]}  # fmt: skip


def _verdict(verdict: str) -> dict:
    return {"on": "alert", "ref": "A1", "verdict": verdict, "reason": f"{verdict}: q is not checked"}


@pytest.mark.parametrize(
    ("findings", "said", "verdict", "reason", "kept"),
    [
        ([], [_verdict("confirmed")], "confirmed", "confirmed: q is not checked", 1),  # a finding made of the alert
        ([OWN], [_verdict("confirmed")], "confirmed", "kmalloc can fail", 1),  # merged into the model's own finding
        ([], [_verdict("refuted")], "refuted", "refuted: q is not checked", 1),
        ([OWN], [], "untriaged", "", 0),  # the model reported its own finding but said nothing of the alert
        ([], [_verdict("uncertain")], "untriaged", "", 0),
    ],
)
def test_the_alerts_verdict_is_read_back_from_the_units_findings(findings, said, verdict, reason, kept):
    candidate = Candidate("a.c", UNIT, 15)
    target = Target(Path("/ws"), "a.c", UNIT, alerts=(alert(ORIGIN, 15),))
    mine = judge(candidate, verdicts.applied(target, findings, said))
    assert (candidate.verdict, candidate.reason, len(mine)) == (verdict, reason, kept)
