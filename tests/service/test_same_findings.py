"""One C file, the same settings (witnesses and the refutation turn on), every front end: the same findings.

The daemon is real (`k3-backend serve --script` on the tiny checkpoint: the real engine, tool parser, agent loop
and refutation turn) and its script is the model: in the audit turn it confirms both of cppcheck's alerts
(``triage_alert``) and reports a double free and an unchecked size; in the refutation turn it refutes the
latter. So what a front end reports depends on both settings reaching the daemon: without the alerts the
overflow cppcheck found is never confirmed (the model has no alert A1 to triage), without the refutation turn
the unchecked size is shown. Each front end (``k3lsp audit``, ``k3lsp review`` of the commit adding the file,
``k3lsp eval castle`` on a one-program dataset, the language server on a save, its workspace audit of the
file unopened, and ``k3lsp mcp``'s ``audit_file`` called by an agent) must report exactly the two findings worked
out below by hand: file, line, CWE, title, message.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from k3lsp.witnesses.analyze import analyze, find
from tests.eval import castle_data
from tests.lsp.test_witnesses import SOURCE  # cppcheck's two alerts, on lines 6 and 8
from tests.mcp.client import WAIT, answer, session
from tests.review import repos
from tests.support import kimi
from tests.support.batch import k3lsp
from tests.support.daemon import module_daemon
from tests.support.lsp import editor

NAME = "bug.c"
OVERFLOW, DOUBLE_FREE = 6, 8  # 1-based file lines of cppcheck's alerts A1 and A2 (function f starts on line 2)
OVERFLOW_REASON = "buf holds 8 bytes and index 9 is past them"
OWN = kimi.finding(title="Double free of p", cwe=415, start_line=7, end_line=7, trace=[])  # unit line 7: line 8
NOISE = kimi.finding(title="Unchecked size", cwe=190, severity="medium", start_line=4, end_line=4, trace=[])
SETTINGS = {"witnesses": ["cppcheck"], "refute": True}
FLAGS = ("--witnesses", "cppcheck", "--refute")

pytestmark = pytest.mark.skipif(find("cppcheck") is None, reason="cppcheck is not installed: apt-get install cppcheck")


def script() -> list[dict]:
    audit = kimi.turn(
        ("triage_alert", {"id": "A1", "verdict": "confirmed", "reason": OVERFLOW_REASON, "cwe": 787}),
        ("triage_alert", {"id": "A2", "verdict": "confirmed", "reason": "p is freed twice"}),
        ("report_finding", OWN),
        ("report_finding", NOISE),
    )
    refutation = kimi.turn(
        ("verdict", {"finding": 1, "verdict": "confirmed", "reason": "nothing resets p"}),
        ("verdict", {"finding": 2, "verdict": "refuted", "reason": "16 is a constant"}),
    )
    return [{"unit": "f", "turns": [audit, refutation]}]


daemon = module_daemon(script, ["--max-tokens", "4000"])


def expected(tmp_path: Path) -> set[tuple]:
    """By hand, from the script: A1 confirmed with no finding of the model's own on its line becomes a finding
    made of the alert (``k3lsp.core.verdicts``: the tool's message as title, the model's reason as message); A2
    merges into the double free on its line; the unchecked size is refuted, so not reported."""
    path = tmp_path / "alone" / NAME
    path.parent.mkdir()
    path.write_text(SOURCE)
    (overflow,) = [a for a in analyze(path, SOURCE, path.parent, ["cppcheck"]).alerts if a.line == OVERFLOW]
    return {
        (NAME, OVERFLOW, 787, f"{overflow.message[:180]} (cppcheck)", OVERFLOW_REASON),
        (NAME, DOUBLE_FREE, 415, OWN["title"], OWN["message"]),
    }


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / NAME).write_text(SOURCE)
    return root


def through_audit(daemon, tmp_path: Path, *more: str) -> set[tuple]:
    root = project(tmp_path)
    args = ("audit", NAME, "--json", "--endpoint", daemon.endpoint, *FLAGS, *more)
    done = k3lsp(*args, cache=tmp_path / "c", cwd=root)
    assert done.returncode == 1, done.stderr
    return {
        (Path(r["path"]).name, r["line"], r["cwe"], r["title"], r["message"])
        for r in json.loads(done.stdout)["findings"]
    }


def through_review(daemon, tmp_path: Path, *more: str) -> set[tuple]:
    root = repos.repository(tmp_path / "repo", {"README": "a project\n"})
    repos.commit(root, {NAME: SOURCE}, "add bug.c")
    args = ("review", "HEAD", "--json", "--endpoint", daemon.endpoint, *FLAGS, *more)
    done = k3lsp(*args, cache=tmp_path / "c", cwd=root)
    assert done.returncode == 1, done.stderr
    (patch,) = json.loads(done.stdout)["patches"]
    assert all(f["introduced"] for f in patch["findings"])
    return {(Path(f["path"]).name, f["line"], f["cwe"], f["title"], f["message"]) for f in patch["findings"]}


def through_eval(daemon, tmp_path: Path, *more: str) -> set[tuple]:
    case = castle_data.Case("416-1", 416, SOURCE, "f", "buf[9] = 0;")  # a label the dataset knows
    dataset = castle_data.write(tmp_path / "castle.json", castle_data.dataset((case,)))
    out = tmp_path / "out"
    args = ("eval", "castle", str(dataset), "--endpoint", daemon.endpoint, "--out", str(out), *FLAGS, *more)
    done = k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ((test,),) = [c["tests"] for c in json.loads((out / "report.json").read_text())["configurations"]]
    return {(NAME, f["line"], f["cwe"], f["title"], f["message"]) for f in test["findings"]}  # its file: blind


def from_diagnostics(diagnostics: list[lsp.Diagnostic]) -> set[tuple]:
    out = set()
    for d in diagnostics:
        assert d.source == "k3-audit", d  # every alert triaged: none is shown as the tool's own
        title, message, *_ = d.message.split("\n")
        out.add((NAME, d.range.start.line + 1, int(str(d.code).removeprefix("CWE-")), title, message))
    return out


async def through_server(daemon, tmp_path: Path) -> set[tuple]:
    root = project(tmp_path)
    async with editor(root, settings={"endpoint": daemon.endpoint} | SETTINGS, cache_dir=tmp_path / "c") as ed:
        uri = ed.open(NAME)
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["audited"] == 1)
        shown = await ed.wait_diagnostics(uri, lambda ds: ds and all(d.source == "k3-audit" for d in ds))
    return from_diagnostics(shown)


async def through_workspace(daemon, tmp_path: Path) -> set[tuple]:
    root = project(tmp_path)
    async with editor(root, settings={"endpoint": daemon.endpoint} | SETTINGS, cache_dir=tmp_path / "c") as ed:
        assert (await ed.command("k3lsp.auditWorkspace"))["files"] == 1
        shown = await ed.wait_diagnostics(ed.uri(NAME), lambda ds: bool(ds))
    return from_diagnostics(shown)


async def through_mcp(daemon, tmp_path: Path) -> set[tuple]:
    async with session(project(tmp_path), daemon.endpoint, *FLAGS, cache=tmp_path / "c") as client:
        found = answer(await client.call_tool("audit_file", {"path": NAME}, WAIT))
    return {(f["file"], f["line"], f["cwe"], f["title"], f["message"]) for f in found["findings"]}


@pytest.mark.parametrize("front_end", [through_audit, through_review, through_eval], ids=["audit", "review", "eval"])
def test_the_command_line_front_ends_report_the_same_findings(daemon, tmp_path, front_end):
    assert front_end(daemon, tmp_path) == expected(tmp_path)


@pytest.mark.parametrize(
    "front_end", [through_server, through_workspace, through_mcp], ids=["server", "workspace", "mcp"]
)
async def test_the_language_server_and_the_mcp_server_report_the_same_findings(daemon, tmp_path, front_end):
    assert await front_end(daemon, tmp_path) == expected(tmp_path)


@pytest.mark.parametrize("front_end", [through_audit, through_review, through_eval], ids=["audit", "review", "eval"])
def test_with_show_refuted_each_reports_the_refuted_finding_too(daemon, tmp_path, front_end):
    refuted = (NAME, 5, NOISE["cwe"], NOISE["title"], NOISE["message"])  # unit line 4 of f: file line 5
    assert front_end(daemon, tmp_path, "--show-refuted") == expected(tmp_path) | {refuted}
