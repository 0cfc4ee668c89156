"""findings: untrusted findings are checked against their unit and mapped to exact file ranges (``spans``), made
LSP types at the language server's edge (``k3lsp.lsp.convert``)."""

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import converters
from lsprotocol import types as lsp

from k3lsp.findings import model as findings
from k3lsp.findings import pipeline, spans
from k3lsp.lsp import convert
from k3lsp.units import split as units
from tests.lsp.conftest import example_text
from tests.support.edits import apply_edits

CHARDEV = example_text("k3demo_chardev.c")


def unit_named(source: str, name: str) -> units.Unit:
    return next(u for u in units.split(source) if u.name == name)


WRITE = unit_named(CHARDEV, "k3demo_write_msg")  # file lines 22-40 (1-based)
OVERFLOW_LINE = 12  # unit line of `if (copy_from_user(slot->buf, ..., hdr.len)) {`, file line 33


def raw(**over):
    base = {
        "cwe": 120,
        "severity": "high",
        "title": "copy_from_user  length\nfrom user space",
        "message": "hdr.len is not checked against sizeof(slot->buf).",
        "start_line": OVERFLOW_LINE,
        "end_line": OVERFLOW_LINE,
        "confidence": 0.8,
        "trace": [{"line": 6, "note": "hdr copied from user"}, {"line": OVERFLOW_LINE, "note": "used as length"}],
        "fix": {
            "start_line": 11,  # `mutex_lock(&k3demo_lock);`: check the length before taking the lock
            "end_line": 11,
            "replacement": "\tif (hdr.len > sizeof(slot->buf))\n\t\treturn -EINVAL;\n\tmutex_lock(&k3demo_lock);\n",
        },
    }
    base.update(over)
    return base


def test_validate_normalises_a_good_finding():
    f = findings.validate(raw(), WRITE)
    assert f.title == "copy_from_user length from user space"
    assert f.trace[0] == findings.TraceStep(6, "hdr copied from user")
    assert f.fix == findings.Fix(
        11, 11, "\tif (hdr.len > sizeof(slot->buf))\n\t\treturn -EINVAL;\n\tmutex_lock(&k3demo_lock);"
    )
    assert findings.validate(f.to_dict(), WRITE) == f  # the cached shape round-trips
    why = findings.validate(raw(reasoning="  hdr.len comes from the user.\n"), WRITE)
    assert why.reasoning == "hdr.len comes from the user." and why.to_dict()["reasoning"] == why.reasoning
    assert findings.validate(why.to_dict(), WRITE) == why and "reasoning" not in f.to_dict()


@pytest.mark.parametrize(
    "bad",
    [
        {"cwe": 0},
        {"cwe": -787},
        {"cwe": "120"},
        {"severity": "catastrophic"},
        {"start_line": 0},
        {"start_line": 5, "end_line": 4},
        {"end_line": WRITE.line_count + 1},
        {"title": "   "},
        {"title": "x" * 201},
        {"confidence": 1.5},
        {"trace": "not a list"},
    ],
)
def test_bad_findings_are_dropped_with_a_log_line(bad, caplog):
    with caplog.at_level(logging.WARNING, logger="k3lsp.findings.model"):
        kept = findings.accept([raw(), raw(**bad)], WRITE)
    assert len(kept) == 1
    assert "dropped a finding for k3demo_write_msg" in caplog.text
    with pytest.raises(findings.FindingError):
        findings.validate(raw(**bad), WRITE)
    assert findings.accept(["not a map", None, 42], WRITE) == []


def test_out_of_range_trace_steps_and_fixes_are_dropped_from_a_kept_finding():
    f = findings.validate(
        raw(
            trace=[{"line": 99, "note": "x"}, {"line": 2, "note": "y"}],
            fix={"start_line": 1, "end_line": 99, "replacement": "x"},
        ),
        WRITE,
    )
    assert f.trace == (findings.TraceStep(2, "y"),) and f.fix is None


def test_diagnostic_maps_to_the_exact_file_range():
    f = findings.validate(raw(), WRITE)
    d = convert.diagnostic(f, WRITE, "file:///ws/k3demo_chardev.c")
    line = CHARDEV.split("\n")[32]
    assert line.startswith("\tif (copy_from_user(slot->buf")
    assert d.range == lsp.Range(lsp.Position(32, 1), lsp.Position(32, len(line)))  # indentation excluded
    assert d.code == "CWE-120" and d.source == "k3-audit"
    assert d.code_description.href == "https://cwe.mitre.org/data/definitions/120.html"
    assert d.severity == lsp.DiagnosticSeverity.Error
    assert d.message.startswith("copy_from_user length from user space\nhdr.len")
    assert [(r.location.range.start.line, r.message) for r in d.related_information] == [
        (26, "hdr copied from user"),
        (32, "used as length"),
    ]
    assert d.data == {"fingerprint": findings.fingerprint(f, WRITE)}
    converters.get_converter().unstructure(d)  # serialisable as JSON-RPC payload


def test_severity_mapping_and_folded_trace():
    expected = {
        "critical": lsp.DiagnosticSeverity.Error,
        "high": lsp.DiagnosticSeverity.Error,
        "medium": lsp.DiagnosticSeverity.Warning,
        "low": lsp.DiagnosticSeverity.Information,
        "info": lsp.DiagnosticSeverity.Hint,
    }
    for severity, lsp_severity in expected.items():
        d = convert.diagnostic(findings.validate(raw(severity=severity), WRITE), WRITE, "file:///x.c")
        assert d.severity == lsp_severity
    d = convert.diagnostic(findings.validate(raw(), WRITE), WRITE, "file:///x.c", related=False)
    assert d.related_information is None and "line 27: hdr copied from user" in d.message


def test_multi_line_range_and_utf16_columns():
    source = "int f(void)\n{\n\t/* é 😀 */ x = 1;\n\ty = 2;\n}\n"
    (unit,) = units.split(source)
    f = findings.validate(
        raw(start_line=3, end_line=3, trace=[], fix={"start_line": 3, "end_line": 3, "replacement": "\tx = 2;"}), unit
    )
    d = convert.diagnostic(f, unit, "file:///f.c")
    assert d.range.start == lsp.Position(2, 1)
    assert d.range.end == lsp.Position(2, len("\t/* é 😀 */ x = 1;") + 1)  # the emoji is two UTF-16 units
    edit = convert.workspace_edit("file:///f.c", pipeline.Reportable(f, unit, "").fix)
    assert apply_edits(source, edit.changes["file:///f.c"]) == "int f(void)\n{\n\tx = 2;\n\ty = 2;\n}\n"
    assert edit.changes["file:///f.c"][0].range.end == lsp.Position(2, len("\t/* é 😀 */ x = 1;") + 1)


def test_fix_edit_replaces_exactly_its_lines():
    f = findings.validate(raw(), WRITE)
    edit = spans.whole_lines(WRITE, f.fix.start_line, f.fix.end_line, f.fix.replacement)
    fixed = apply_edits(CHARDEV, [edit])
    lines = fixed.split("\n")
    original = CHARDEV.split("\n")
    assert original[31] == "\tmutex_lock(&k3demo_lock);"
    assert lines[31:35] == [
        "\tif (hdr.len > sizeof(slot->buf))",
        "\t\treturn -EINVAL;",
        "\tmutex_lock(&k3demo_lock);",
        original[32],
    ]
    assert lines[:31] == original[:31] and lines[35:] == original[33:]
    without_fix = findings.validate({k: v for k, v in raw().items() if k != "fix"}, WRITE)
    assert pipeline.Reportable(without_fix, WRITE, "").fix is None
    assert convert.workspace_edit("file:///c.c", None) is None


def test_fingerprint_is_stable_when_code_above_moves_and_differs_otherwise():
    f = findings.validate(raw(), WRITE)
    moved = unit_named("// a\n// b\n// c\n" + CHARDEV, "k3demo_write_msg")
    assert moved.start_line == WRITE.start_line + 3
    assert findings.fingerprint(f, moved) == findings.fingerprint(f, WRITE)
    d_moved = convert.diagnostic(f, moved, "file:///x.c")
    assert d_moved.range.start.line == 35
    assert findings.fingerprint(findings.validate(raw(cwe=787), WRITE), WRITE) != findings.fingerprint(f, WRITE)
    other_title = findings.validate(raw(title="other"), WRITE)
    assert findings.fingerprint(other_title, WRITE) != findings.fingerprint(f, WRITE)
    other_line = findings.validate(raw(start_line=11, end_line=11), WRITE)
    assert findings.fingerprint(other_line, WRITE) != findings.fingerprint(f, WRITE)


def test_hover_has_everything_and_escapes_model_text():
    f = findings.validate(raw(message="see [link](command:rm) and <b>bold</b>"), WRITE)
    md = findings.hover_text(f, WRITE)
    for part in (
        "**copy\\_from\\_user length from user space**",
        "[CWE-120](https://cwe.mitre.org/data/definitions/120.html)",
        "severity **high**",
        "confidence 80%",
        "1. line 27: hdr copied from user",
        "**Suggested fix** (line 32)",
        "```c\n\tif (hdr.len",
    ):
        assert part in md, part
    assert "\\[link\\] \\(command\\:rm\\)" in md and "\\<b\\>bold\\<\\/b\\>" in md  # text, never a link or HTML
    hover = convert.hover(f, WRITE, findings.HoverStyle())
    assert hover.contents.kind == lsp.MarkupKind.Markdown and hover.range.start.line == 32
    fenced = findings.validate(raw(fix={"start_line": 1, "end_line": 1, "replacement": "```c\nx"}), WRITE)
    assert "````c\n```c\nx\n````" in findings.hover_text(fenced, WRITE)
    assert "Why this was flagged" not in md  # no reasoning came with it


def test_hover_says_briefly_why_it_was_flagged():
    long = "The length *hdr.len* comes from the user.\n\n" + " ".join(f"step{i}" for i in range(200))
    md = findings.hover_text(findings.validate(raw(reasoning=long), WRITE), WRITE)
    line = next(p for p in md.split("\n\n") if p.startswith("**Why this was flagged:**"))
    assert "The length \\*hdr\\.len\\* comes from the user\\. step0 step1" in line  # escaped, on one line
    assert line.endswith(" …") and len(line) < findings.HOVER_REASONING_CHARS + 60


def test_min_severity_filter():
    fs = [findings.validate(raw(severity=s), WRITE) for s in findings.SEVERITIES]
    assert [f.severity for f in findings.at_least(fs, "medium")] == ["critical", "high", "medium"]
    assert len(findings.at_least(fs, "info")) == 5
    with pytest.raises(ValueError, match="unknown severity"):
        findings.at_least(fs, "severe")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)
keys = st.sampled_from(["cwe", "severity", "title", "message", "start_line", "end_line", "confidence", "trace", "fix"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=9))
def test_accept_never_raises_and_keeps_only_findings_inside_the_unit(overrides):
    for f in findings.accept([raw(**overrides)], WRITE):
        assert 1 <= f.start_line <= f.end_line <= WRITE.line_count
        assert all(1 <= s.line <= WRITE.line_count for s in f.trace)
        convert.diagnostic(f, WRITE, "file:///x.c")
        findings.hover_text(f, WRITE)
