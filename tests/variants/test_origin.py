"""The finding a variant search starts from (k3lsp/variants/origin.py): the same finding read from the JSON and
the SARIF report `k3lsp audit` writes, and a file and line; every wrong value is one sentence naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3lsp.findings.report import Reported
from k3lsp.variants.origin import OriginError, from_place, from_report
from tests.variants.tree import plant
from tests.variants.tree import reports as written

ROW = dict(path="ws/drivers/net/a.c", uri="drivers/net/a.c", line=7, column=2, end_line=7, end_column=14,
           severity="high", cwe=476, title="p is used before its NULL check",
           message="kmalloc can return NULL", unit="a_open", fingerprint="ab" * 32)  # fmt: skip


@pytest.fixture
def reports(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = plant(tmp_path.resolve() / "ws")
    return root, *written(root, tmp_path, Reported(**ROW))


def test_the_json_and_the_sarif_report_give_the_same_finding(reports):
    root, as_json, as_sarif = reports
    for report in (as_json, as_sarif):
        o = from_report(report, 1)
        assert (o.root, o.path, o.line, o.end_line, o.cwe, o.severity) == (
            root,
            root / "drivers/net/a.c",
            7,
            7,
            476,
            "high",
        )
        assert (o.title, o.message, o.fingerprint, o.rel) == (ROW["title"], ROW["message"], "ab" * 32, ROW["uri"])


def test_a_finding_past_the_end_or_a_report_of_something_else_is_said(reports, tmp_path):
    _, as_json, as_sarif = reports
    with pytest.raises(OriginError, match=r"^--finding 2: the report has findings 1 to 1$"):
        from_report(as_sarif, 2)
    with pytest.raises(OriginError, match=r"^--finding 0: the report has findings 1 to 1$"):
        from_report(as_json, 0)
    (tmp_path / "other.json").write_text('{"version": 1}')
    with pytest.raises(OriginError, match="neither a JSON report"):
        from_report(tmp_path / "other.json", 1)
    with pytest.raises(OriginError, match="cannot read the report"):
        from_report(tmp_path / "missing.json", 1)


def test_a_report_whose_finding_leaves_its_root_is_refused(reports, tmp_path):
    _, as_json, _ = reports
    body = json.loads(as_json.read_text())
    body["findings"][0]["uri"] = "../../etc/passwd"
    as_json.write_text(json.dumps(body))
    with pytest.raises(OriginError, match=r"'\.\./\.\./etc/passwd' is outside the report's root"):
        from_report(as_json, 1)


def test_a_file_and_line_in_the_workspace(reports, monkeypatch):
    root = reports[0]
    monkeypatch.chdir(root)
    o = from_place("drivers/usb/b.c:14", root, "c is freed twice")
    assert (o.path, o.line, o.title, o.cwe) == (root / "drivers/usb/b.c", 14, "c is freed twice", 710)
    for place, said in (("b.c", "is not FILE:LINE"), ("drivers/usb/b.c:99", "the file has 16 lines"),
                        ("/etc/passwd:1", "outside the workspace"), ("nope.c:3", "no such file")):  # fmt: skip
        with pytest.raises(OriginError, match=said):
            from_place(place, root)
