"""suppress: inline `k3-audit: ignore` comments and the workspace baseline file."""

import json

import pytest

from k3lsp.findings import suppress
from tests.support.edits import apply_edits

SOURCE = """\
static long f(void __user *argp)
{
	struct msg hdr;

	if (copy_from_user(buf, argp, hdr.len))
		return -EFAULT;
	return table[hdr.slot];
}
"""


def test_directive_parsing():
    assert suppress.ignored_cwes("x = 1;") is None
    assert suppress.ignored_cwes("/* k3-audit: ignore */") == frozenset()
    assert suppress.ignored_cwes("foo(); // k3-audit: ignore CWE-120") == {120}
    assert suppress.ignored_cwes("/* K3-AUDIT: ignore cwe-120, CWE-787 CWE-129 */") == {120, 787, 129}


def test_suppressed_on_the_line_or_the_line_above_only():
    lines = SOURCE.split("\n")
    lines[4] += " /* k3-audit: ignore CWE-120 */"
    assert suppress.is_suppressed(lines, 4, 120)
    assert suppress.is_suppressed(lines, 5, 120)  # the line below a directive: "ignore the next line"
    assert not suppress.is_suppressed(lines, 6, 120)  # two lines away
    assert not suppress.is_suppressed(lines, 4, 787)  # another CWE
    lines[5] = "\t/* k3-audit: ignore */"
    assert suppress.is_suppressed(lines, 6, 129)  # no CWE: everything
    assert not suppress.is_suppressed(lines, 0, 1) and not suppress.is_suppressed([], 3, 1)


def test_suppression_edit_inserts_an_indented_comment_that_is_then_honoured():
    lines = SOURCE.split("\n")
    edit = suppress.suppression_edit(lines, 4, 120)
    after = apply_edits(SOURCE, [edit]).split("\n")
    assert after[4] == "\t/* k3-audit: ignore CWE-120 */"
    assert after[5] == lines[4]
    assert suppress.is_suppressed(after, 5, 120)
    assert suppress.suppression_edit(after, 5, 120) is None  # already silenced: nothing to do


def test_second_cwe_extends_the_existing_directive():
    lines = apply_edits(SOURCE, [suppress.suppression_edit(SOURCE.split("\n"), 4, 120)]).split("\n")
    edit = suppress.suppression_edit(lines, 5, 787)
    after = apply_edits("\n".join(lines), [edit]).split("\n")
    assert after[4] == "\t/* k3-audit: ignore CWE-120, CWE-787 */"
    assert len(after) == len(lines)  # no second comment line that would push the first out of reach
    assert suppress.is_suppressed(after, 5, 787) and suppress.is_suppressed(after, 5, 120)


def test_baseline_round_trip(tmp_path):
    base = suppress.Baseline.load(tmp_path)
    assert base.error is None and "abc" not in base
    assert base.add("ff00", 120, "overflow", "drivers/x.c")
    assert base.add("aa11", 787, "oob write", "drivers/a.c")
    assert not base.add("ff00", 120, "overflow", "drivers/x.c")
    again = suppress.Baseline.load(tmp_path)
    assert "ff00" in again and "aa11" in again and again.error is None
    data = json.loads((tmp_path / suppress.BASELINE_NAME).read_text())
    assert data["version"] == 1
    assert [e["path"] for e in data["findings"]] == ["drivers/a.c", "drivers/x.c"]  # sorted: diffs well
    assert data["findings"][1] == {"fingerprint": "ff00", "cwe": 120, "title": "overflow", "path": "drivers/x.c"}
    assert [p.name for p in tmp_path.iterdir()] == [suppress.BASELINE_NAME]  # no temp files left


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2]",
        '{"version": 9, "findings": []}',
        '{"version": 1, "findings": {}}',
        '{"version": 1, "findings": [{"cwe": 1}]}',
        b"\xff\xfe",
    ],
)
def test_broken_baseline_loads_empty_with_a_clear_error_and_is_never_overwritten(tmp_path, content):
    path = tmp_path / suppress.BASELINE_NAME
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    base = suppress.Baseline.load(tmp_path)
    assert base.entries == {} and str(path) in base.error
    with pytest.raises(suppress.BaselineError, match=r"baseline|cannot read"):
        base.add("ff00", 120, "t", "p.c")
    assert path.read_bytes() == (content if isinstance(content, bytes) else content.encode())


def test_unwritable_baseline_is_a_clear_error(tmp_path):
    base = suppress.Baseline.load(tmp_path / "missing-dir")
    with pytest.raises(suppress.BaselineError, match="cannot write"):
        base.add("ff00", 120, "t", "p.c")
