"""`k3lsp audit --format sarif` end to end on a directory of C files against a real scripted `k3-backend`:
the log is valid against the official SARIF 2.1.0 schema and every result points at the right lines."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from k3lsp import __version__
from k3lsp.cli.sarif import FINGERPRINT_KEY
from tests.batch import corpus
from tests.support.batch import k3lsp

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())


def valid_sarif(text: str) -> dict:
    log = json.loads(text)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    return log


@pytest.fixture
def audited(corpus_daemon, tmp_path):
    """The corpus audited once into SARIF (with -o) and once, from the cache, into JSON."""
    root = corpus.tree(tmp_path)
    out = tmp_path / "audit.sarif"
    common = ("--endpoint", corpus_daemon.endpoint)
    sarif_run = k3lsp("audit", "proj", *common, "--format", "sarif", "-o", str(out), cache=tmp_path / "c", cwd=tmp_path)
    json_run = k3lsp("audit", "proj", *common, "--json", cache=tmp_path / "c", cwd=tmp_path)
    return root, sarif_run, out, json_run


def test_sarif_is_schema_valid_with_rules_per_cwe_and_results_on_the_right_lines(audited):
    root, run, out, _ = audited
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""  # the report went to -o
    log = valid_sarif(out.read_text())
    assert log["version"] == "2.1.0"
    (sarif_run,) = log["runs"]
    rules = sarif_run["tool"]["driver"]["rules"]
    assert sarif_run["tool"]["driver"]["version"] == __version__  # as `k3lsp --version` says (docs/cli.md)
    assert [r["id"] for r in rules] == ["CWE-125", "CWE-457", "CWE-787"]
    assert rules[2]["helpUri"] == "https://cwe.mitre.org/data/definitions/787.html"
    assert rules[2]["shortDescription"]["text"] == "Out-of-bounds Write"
    assert sarif_run["originalUriBaseIds"]["SRCROOT"]["uri"] == root.resolve().as_uri() + "/"
    assert sarif_run["invocations"] == [{"executionSuccessful": True, "exitCode": 1}]

    got = []
    for result in sarif_run["results"]:
        loc = result["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "SRCROOT"
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        got.append((loc["artifactLocation"]["uri"], result["ruleId"], result["level"], loc["region"]))
    memcpy = corpus.line_of(corpus.PARSE_C, "memcpy(")
    index = corpus.line_of(corpus.PARSE_C, "return table[i]")
    decl = corpus.line_of(corpus.PROTO_H, "int v;")
    # Regions as the editor's diagnostics: from the first non-blank character (after the tab: column 2)
    # to the end of the last line, end column exclusive, in UTF-16 code units.
    assert corpus.end_column(corpus.PARSE_C, memcpy) == len(corpus.PARSE_C.split("\n")[memcpy - 1]) + 2  # 😀

    def region(text: str, first: int, last: int) -> dict:
        return {"startLine": first, "startColumn": 2, "endLine": last, "endColumn": corpus.end_column(text, last)}

    assert got == [
        ("src/net/parse.c", "CWE-787", "error", region(corpus.PARSE_C, memcpy, memcpy)),
        ("src/net/parse.c", "CWE-125", "warning", region(corpus.PARSE_C, index, index)),
        ("src/net/proto.h", "CWE-457", "note", region(corpus.PROTO_H, decl, decl + 1)),
    ]


def test_traces_are_code_flows_fixes_are_replacements_and_fingerprints_match_the_json(audited):
    _, _, out, json_run = audited
    results = valid_sarif(out.read_text())["runs"][0]["results"]
    memcpy_result = results[0]
    head = corpus.line_of(corpus.PARSE_C, "static int parse_header")
    memcpy = corpus.line_of(corpus.PARSE_C, "memcpy(")
    (flow,) = memcpy_result["codeFlows"]
    steps = [(s["location"]["physicalLocation"]["region"]["startLine"], s["location"]["message"]["text"])
             for s in flow["threadFlows"][0]["locations"]]  # fmt: skip
    assert steps == [(head, "n comes from the caller"), (memcpy, "copied without a bound")]
    assert "codeFlows" not in results[1]  # no trace, no flow

    (fix,) = memcpy_result["fixes"]
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "src/net/parse.c"
    (replacement,) = change["replacements"]
    assert replacement["insertedContent"]["text"] == corpus.FIX_TEXT
    whole_line = {"startLine": memcpy, "startColumn": 1, "endLine": memcpy}
    assert replacement["deletedRegion"] == whole_line | {"endColumn": corpus.end_column(corpus.PARSE_C, memcpy)}
    assert all("fixes" not in r for r in results[1:])
    assert memcpy_result["properties"]["confidence"] == 0.9
    assert memcpy_result["properties"]["reasoning"] == corpus.MEMCPY_WHY  # why the model flagged it
    assert all("reasoning" not in r["properties"] for r in results[1:])  # no reasoning written: none carried

    assert json_run.returncode == 1, json_run.stderr
    body = json.loads(json_run.stdout)
    assert body["stats"]["audited"] == 0 and body["stats"]["cached"] == corpus.UNITS
    assert [r["partialFingerprints"][FINGERPRINT_KEY] for r in results] == [f["fingerprint"] for f in body["findings"]]
    assert [f["reasoning"] for f in body["findings"]] == [corpus.MEMCPY_WHY, "", ""]


def test_fingerprints_survive_lines_inserted_above_while_locations_move(corpus_daemon, tmp_path):
    root = corpus.tree(tmp_path)
    args = ("audit", "proj", "--endpoint", corpus_daemon.endpoint, "--format", "sarif")
    before = valid_sarif(k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path).stdout)["runs"][0]["results"]
    parse_c = root / "src/net/parse.c"
    parse_c.write_text("/* licence\n * header\n */\n" + parse_c.read_text())
    after = valid_sarif(k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path).stdout)["runs"][0]["results"]

    def where(results):
        return [(r["locations"][0]["physicalLocation"]["region"]["startLine"],
                 r["partialFingerprints"][FINGERPRINT_KEY]) for r in results if r["ruleId"] == "CWE-787"]  # fmt: skip

    [(line_before, print_before)], [(line_after, print_after)] = where(before), where(after)
    assert line_after == line_before + 3
    assert print_after == print_before
