"""No silent suppression: a `k3-audit: ignore` directive counts only in a comment, and what is silenced is counted.

The attack: the directive counted anywhere on the flagged line or the line above, a string literal included, so
``printf(name); puts("k3-audit: ignore");`` hid the format-string finding on that line; and findings silenced by
a comment or by the baseline (`.k3audit-baseline.json`, which a repository ships) were counted nowhere, so a
reviewer could not tell "nothing found" from "everything hidden". Now the directive is read from comments only
(``k3lsp.units.comments``: strings, character literals, line continuations, ``//`` and ``/* */``), and the editor's
status, ``k3lsp status``'s answer, the CLI's summary and SARIF (``suppressions`` of kind ``inSource`` and
``external``, checked against the SARIF 2.1.0 schema) say how many were silenced.
"""

from __future__ import annotations

import json

import pytest

from k3lsp.findings import model as findings
from k3lsp.findings import suppress
from k3lsp.units import comments
from k3lsp.units import split as units
from tests.batch.test_sarif import valid_sarif
from tests.support import kimi
from tests.support.batch import project, run_k3lsp
from tests.support.fake_daemon import FakeScript
from tests.support.lsp import editor
from tests.support.peer import WELCOME, peer, reply

SOURCE = """\
#include <stdio.h>
#include <string.h>

void greet(const char *name)
{
\tprintf(name); puts("k3-audit: ignore");
}

int copy(char *dst, const char *src, int n)
{
\t/* k3-audit: ignore CWE-787 */
\tmemcpy(dst, src, n);
\treturn n;
}

int slot(int *v, int i)
{
\treturn v[i];
}
"""
FINDINGS = {
    "greet": kimi.finding(cwe=134, title="format string from the caller", start_line=3, end_line=3, trace=[]),
    "copy": kimi.finding(cwe=787, title="memcpy without a bound", start_line=4, end_line=4, trace=[]),
    "slot": kimi.finding(cwe=129, severity="medium", title="unchecked index", start_line=3, end_line=3, trace=[]),
}


def baseline_slot(root) -> None:
    """Accept the `slot` finding in the workspace baseline, by its fingerprint (as the code action does)."""
    unit = next(u for u in units.split(SOURCE) if u.name == "slot")
    fingerprint = findings.fingerprint(findings.validate(FINDINGS["slot"], unit), unit)
    suppress.Baseline.load(root).add(fingerprint, 129, "unchecked index", "demo.c")


@pytest.mark.parametrize(
    ("line", "directive"),
    [
        ('puts("k3-audit: ignore");', None),
        ("x = 1; // k3-audit: ignore CWE-134", {134}),
        ('s = "/* not a comment"; // k3-audit: ignore', set()),
        ("c = '\"'; /* k3-audit: ignore CWE-1 */", {1}),
        ('s = "\\" // k3-audit: ignore";', None),  # an escaped quote does not end the string
        ("n = 1'000'000; // k3-audit: ignore", set()),  # C23 digit separators are no character literals
        ("c = u8'/'; k = L'\"'; // k3-audit: ignore", set()),
        ("k3-audit: ignore", None),  # code (a label and an expression), not a comment
        ('/* k3-audit */ f(); x = "ignore";', None),
    ],
)
def test_a_directive_counts_only_in_a_comment(line, directive):
    assert suppress.ignored_cwes(line) == (None if directive is None else frozenset(directive))


def test_comments_and_literals_over_several_lines():
    lines = [
        's = "a \\',  # a backslash-newline continues the string: the next line is still in it
        '// k3-audit: ignore";',
        "// a comment continued \\",
        "k3-audit: ignore",  # still the comment of the line above
        "/* begins",
        "   k3-audit: ignore CWE-9",
        '   ends */ puts("k3-audit: ignore");',
        "x; // after",
    ]
    assert suppress.is_suppressed(lines, 1, 1) is False
    assert suppress.is_suppressed(lines, 3, 1) and suppress.is_suppressed(lines, 5, 9)
    assert not suppress.is_suppressed(lines, 7, 1)  # the string on line 6 is no directive for line 7
    parts = comments.on_lines(lines, len(lines) - 1)
    assert parts[4] == [(0, "/* begins")] and parts[6] == [(0, "   ends */")] and parts[7] == [(3, "// after")]
    assert 0 not in parts and 1 not in parts


# --- the editor: the status says what is silenced ----------------------------------------------------------


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    script = FakeScript(tmp_path / "fake-auditor.json")
    script.write({"units": {name: {"findings": [f]} for name, f in FINDINGS.items()}})
    return script


async def test_the_editor_shows_the_finding_behind_a_string_and_counts_the_silenced_ones(fake, tmp_path):
    root = project(tmp_path, {"demo.c": SOURCE})
    baseline_slot(root)
    async with editor(root, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 1
        shown = await ed.wait_diagnostics(uri, lambda d: len(d) == 1)
        await ed.wait_for(lambda: ed.status_notes and ed.status_notes[-1].get("suppressed") == 1)
        status = await ed.status()
    assert [d.code for d in shown] == ["CWE-134"]  # not hidden by the string on its line
    assert ed.status_notes[-1]["suppressed"] == 1 and ed.status_notes[-1]["baselined"] == 1
    assert status["silenced"] == {"suppressed": 1, "baselined": 1, "refuted": 0, "unbuilt": 0}


# --- the CLI and SARIF -------------------------------------------------------------------------------------


async def answer(sock, ident, msg):
    """A daemon (a scripted ROUTER) answering each unit with its finding of FINDINGS."""
    kind, msg_id = msg["kind"], msg["id"]
    if kind == "hello":
        await reply(sock, ident, "welcome", msg_id, **(WELCOME | {"fingerprint": "f" * 64}))
    elif kind == "audit":
        if msg["unit"] in FINDINGS:
            await reply(sock, ident, "finding", msg_id, finding=FINDINGS[msg["unit"]])
        await reply(sock, ident, "done", msg_id, stats={"finish_reason": "stop"})


async def test_the_cli_summary_and_sarif_carry_the_silenced_findings(tmp_path):
    root = project(tmp_path, {"demo.c": SOURCE})
    baseline_slot(root)
    async with peer(answer) as endpoint:
        common = ("audit", "proj", "--endpoint", endpoint)
        code, text, err = await run_k3lsp(*common, cache=tmp_path / "c", cwd=tmp_path)
        _, as_json, _ = await run_k3lsp(*common, "--json", cache=tmp_path / "c", cwd=tmp_path)
        _, as_sarif, _ = await run_k3lsp(*common, "--format", "sarif", cache=tmp_path / "c", cwd=tmp_path)
    assert code == 1, err  # the format string is a finding
    first, summary = text.splitlines()
    assert first == "proj/demo.c:6:2: high CWE-134 format string from the caller"
    assert "1 findings, 1 suppressed, 1 baselined" in summary, summary
    stats = json.loads(as_json)["stats"]
    assert (stats["findings"], stats["suppressed"], stats["baselined"]) == (1, 1, 1)
    results = valid_sarif(as_sarif)["runs"][0]["results"]
    kinds = {r["ruleId"]: [s["kind"] for s in r.get("suppressions", [])] for r in results}
    assert kinds == {"CWE-134": [], "CWE-787": ["inSource"], "CWE-129": ["external"]}
