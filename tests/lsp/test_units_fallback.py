"""A file beyond the splitter's limits is audited in line windows with a note, never a crash.

1,000 nested ``#if`` (13 KB) or 500 ``#if/#else {`` blocks once raised RecursionError out of ``units.split``:
``k3lsp audit`` died with exit 1 (which means "findings") and no SARIF, a workspace audit stopped at the
file, and the file was never audited. Here the same files are split, audited by the CLI and by a workspace
audit through the real language server, against the scripted daemon.
"""

from __future__ import annotations

import json

import pytest

from k3lsp.cli import main as cli
from k3lsp.tools import sandbox
from k3lsp.units import kernelc
from k3lsp.units import split as units
from tests.lsp import scripted
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere
from tests.support.lsp import editor

DEEP_IF = "#if A\n" * 1000 + "int f(char *p)\n{\n\treturn p[0];\n}\n" + "#endif\n" * 1000
IF_ELSE = "".join(f"#if A\nint f{i}(void) {{\n#else\nint g{i}(void) {{\n#endif\n" for i in range(500)) + "}\n" * 500


@pytest.mark.parametrize("source", [DEEP_IF, IF_ELSE], ids=["nested-if", "if-else-braces"])
def test_a_file_beyond_the_splitters_limits_becomes_line_windows_with_a_note(source, tmp_path, monkeypatch):
    lines = source.removesuffix("\n").split("\n")
    split = units.split(source)
    assert split and all(u.kind == units.WINDOW_KIND for u in split)
    assert [line for u in split for line in u.text.split("\n")] == lines  # every line, once, in order
    assert all(u.line_count <= units.WINDOW_LINES for u in split)
    assert split[0].name == f"lines 1-{units.WINDOW_LINES}"
    note = units.fallback_note(split)
    assert note is not None and f"{len(split)} windows of up to {units.WINDOW_LINES} lines" in note
    assert units.fallback_note(units.split(scripted.DEMO_C)) is None
    (tmp_path / "deep.c").write_text(source)
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))  # the symbol index goes there, not the user's
    answer = sandbox.find_definition(tmp_path, "f0")  # the model's tool survives it too, and says what it read
    assert "definition of f0" in answer and "the symbol index of 1 file " in answer


def test_with_the_limit_lifted_nothing_recurses(monkeypatch):
    """The splitter once recursed per level (the limit stood in for Python's stack); now nothing does: with the
    limit lifted, the 1,000 levels split into their function."""
    monkeypatch.setattr(kernelc, "MAX_NESTING", 10**6)
    (unit,) = units.parse(DEEP_IF).units
    assert (unit.name, unit.start_line, unit.end_line) == ("f", 1000, 1003)
    assert [u.name for u in units.parse(IF_ELSE).units] == ["f0"]  # 500 braces open in the #if branches


def workspace(tmp_path):
    root = scripted.workspace(tmp_path)
    (root / "slow.c").unlink()  # 3000 forced tokens: not needed here
    (root / "a_deep.c").write_text(DEEP_IF)  # sorted before demo.c: the workspace audit meets it first
    return root


def test_the_batch_audit_keeps_its_exit_codes_and_writes_sarif(daemon, tmp_path):
    from tests.batch.test_sarif import valid_sarif  # its corpus is model turns: transformers, like the daemon

    workspace(tmp_path)
    args = ("--endpoint", daemon.endpoint)
    result = k3lsp("audit", "ws", *args, "--format", "sarif", cache=tmp_path / "c", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # demo.c's findings, not a crash
    run = valid_sarif(result.stdout)["runs"][0]
    assert sorted(r["ruleId"] for r in run["results"]) == ["CWE-129", "CWE-787"]
    notes = [n["message"]["text"] for n in run["invocations"][0]["toolExecutionNotifications"]]
    # the file as the user named it (from the current directory), as its findings are
    assert len(notes) == 1 and notes[0].startswith("ws/a_deep.c: ") and "audited as 11 windows" in notes[0]
    assert "k3lsp audit: warning: ws/a_deep.c: " in result.stderr

    clean = k3lsp("audit", "ws/a_deep.c", *args, "--json", cache=tmp_path / "c", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["stats"]["units"] == 11  # 2,004 lines in windows of 200


def test_an_unexpected_fault_in_the_batch_audit_exits_2_not_1(monkeypatch, tmp_path, capsys):
    from k3lsp.cli import batch

    async def broken(*args, **kwargs):
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(batch, "audit_paths", broken)
    (tmp_path / "a.c").write_text("int f(void) { return 0; }\n")
    assert cli.main(["audit", str(tmp_path / "a.c"), "--endpoint", nowhere(tmp_path)]) == batch.EXIT_ERROR
    assert "k3lsp audit: error: RuntimeError: something nobody expected" in capsys.readouterr().err


async def test_a_workspace_audit_goes_on_past_the_file_and_audits_it(daemon, tmp_path):
    root = workspace(tmp_path)
    async with editor(root, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        result = await ed.command("k3lsp.auditWorkspace", timeout=120)
        assert result == {"files": 3, "error": None, "left_out": 0, "cancelled": False}
        demo = await ed.wait_diagnostics(ed.uri("demo.c"), lambda d: len(d) == 2)
        assert {d.code for d in demo} == {"CWE-787", "CWE-129"}
        notes = [m.message for m in ed.client.messages if "line windows" in m.message]
        assert len(notes) == 1 and notes[0].startswith("a_deep.c: ")
        counters = (await ed.status())["counters"]
    assert counters["failed"] == 0 and counters["audited"] == 11 + 3  # the windows, demo.c's 2 and leaky.c's 1
