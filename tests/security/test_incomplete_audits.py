"""Audits the daemon cuts short, through the real engine: shown as incomplete, never cached as clean.

A busy or hostile-input daemon stops audits on its budgets (`length`: the token budget, `loop`: the loop
guard, `budget`: the tool rounds). Such a unit was not audited to the end: `k3lsp audit` says so (an error,
exit 2, a SARIF notification) instead of a clean pass, the editor shows a warning, and the next run audits
it again. The scripted turns are forced through the real engine, so the finish reasons are the engine's.
"""

from __future__ import annotations

import json

from backend.fingerprint import checkpoint_fingerprint
from tests.batch.test_sarif import valid_sarif
from tests.support import kimi
from tests.support.batch import k3lsp, project
from tests.support.daemon import Wire, module_daemon
from tests.support.lsp import editor

LONG = " ".join(f"w{i}" for i in range(40)) + " "  # a period too long for the loop guard
FINDING = kimi.finding(title="write past buf", start_line=3, end_line=3, trace=[])
A_C = "int truncated(char *buf, int n)\n{\n\tbuf[n] = 0;\n\treturn n;\n}\n\nint clean(int n)\n{\n\treturn n;\n}\n"
B_C = "int looping(int n)\n{\n\treturn n;\n}\n\nint asks(int n)\n{\n\treturn n;\n}\n"
PROJECT = {"a.c": A_C, "b.c": B_C}


def script() -> list[dict]:
    truncated = kimi.opening() + kimi.tools(("report_finding", FINDING)) + LONG * 30 + kimi.END
    return [
        {"unit": "truncated", "turns": [truncated]},  # a finding, then prose past the token budget: `length`
        {"unit": "looping", "turns": [{"repeat": "ab ", "tokens": 2000}]},  # the loop guard: `loop`
        {"unit": "asks", "turns": [kimi.turn(("read_lines", {"path": "a.c", "start": 1, "end": 2}))]},  # `budget`
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


daemon = module_daemon(script, ["--max-tokens", "600", "--max-tool-rounds", "0"])


async def test_the_welcome_names_the_checkpoint_served(daemon, tiny_model):
    async with Wire(daemon.endpoint, timeout=10) as wire:
        welcome = await wire.ask("hello", "h", client="test", version="0")
    assert welcome["fingerprint"] == checkpoint_fingerprint(tiny_model)
    assert welcome["model"] == tiny_model.name


def test_cut_short_units_make_the_batch_audit_incomplete_and_are_audited_again(daemon, tmp_path):
    project(tmp_path, PROJECT)
    args = ("audit", "proj", "--endpoint", daemon.endpoint, "--format", "sarif")
    first = k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path)
    assert first.returncode == 2, first.stderr  # not 1 ("findings") and never 0: the audit is not complete
    run = valid_sarif(first.stdout)["runs"][0]
    assert [r["message"]["text"].split("\n")[0] for r in run["results"]] == ["write past buf"]  # still reported
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
    notes = sorted(n["message"]["text"] for n in invocation["toolExecutionNotifications"] if n["level"] == "error")
    assert [n.split(": the audit")[0] for n in notes] == ["a.c: truncated", "b.c: asks", "b.c: looping"]
    assert "cut short (length)" in notes[0] and "cut short (budget)" in notes[1] and "cut short (loop)" in notes[2]
    assert all("not cached, a rerun audits it again" in n for n in notes)
    assert "k3lsp audit: error: a.c: truncated: the audit was cut short (length)" in first.stderr

    again = k3lsp(*args[:-2], "--json", cache=tmp_path / "c", cwd=tmp_path)
    assert again.returncode == 2
    stats = json.loads(again.stdout)["stats"]
    assert (stats["units"], stats["cached"], stats["audited"], stats["incomplete"]) == (4, 1, 3, 3)


def test_allow_incomplete_makes_cut_short_units_warnings_and_the_status_says_findings(daemon, tmp_path):
    """`k3-backend demo` on random weights: every unit is cut short, which must not read as a failed run."""
    project(tmp_path, PROJECT)
    run = k3lsp(
        "audit",
        "proj",
        "--endpoint",
        daemon.endpoint,
        "--format",
        "sarif",
        "--allow-incomplete",
        cache=tmp_path / "c",
        cwd=tmp_path,
    )
    assert run.returncode == 1, run.stderr  # the finding of the complete unit, nothing else
    invocation = valid_sarif(run.stdout)["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is True
    notes = invocation["toolExecutionNotifications"]
    levels = {n["message"]["text"].split(": the audit")[0]: n["level"] for n in notes}
    assert levels == {"a.c: truncated": "warning", "b.c: asks": "warning", "b.c: looping": "warning"}
    assert "k3lsp audit: warning: a.c: truncated: the audit was cut short (length)" in run.stderr


async def test_the_editor_warns_about_a_cut_short_unit_and_audits_it_again(daemon, tmp_path):
    root = project(tmp_path, PROJECT)
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("a.c")
        summary = await ed.command("k3lsp.auditFile", uri)
        assert summary["incomplete"] == 1 and summary["error"] is None
        warnings = [m.message for m in ed.client.messages if "cut short" in m.message]
        assert warnings == [
            "k3 audit of a.c was cut short for truncated (length): findings there may be missing. "
            "Not cached: audited again on the next save."
        ]
        shown = await ed.wait_diagnostics(uri, lambda d: len(d) == 1)
        assert shown[0].message.startswith("write past buf")  # what it found is shown

        again = await ed.command("k3lsp.auditFile", uri)
        counters = (await ed.status())["counters"]
    assert again["incomplete"] == 1
    assert (counters["sent"], counters["cached"], counters["incomplete"]) == (3, 1, 2)
