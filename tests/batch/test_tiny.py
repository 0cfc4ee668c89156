"""`k3lsp audit --format sarif` on the tiny real checkpoint, unscripted: the shipped path end to end (prompt
through the chat template, real generation, the tool parser on whatever the random weights say)."""

from __future__ import annotations

from tests.batch import corpus
from tests.batch.test_sarif import valid_sarif
from tests.support.batch import k3lsp, stats
from tests.support.daemon import serving


def test_tiny_checkpoint_audits_every_unit_into_valid_sarif(tiny_model, tmp_path):
    corpus.tree(tmp_path)
    with serving(tiny_model, args=["--max-tokens", "24"]) as daemon:
        result = k3lsp("audit", "proj", "--endpoint", daemon.endpoint, "--format", "sarif", "--jobs", "2",
                       cache=tmp_path / "c", cwd=tmp_path)  # fmt: skip
        again = k3lsp("audit", "proj", "--endpoint", daemon.endpoint, "--json", cache=tmp_path / "c", cwd=tmp_path)
    run = valid_sarif(result.stdout)["runs"][0]
    invocation = run["invocations"][0]
    notes = [n["message"]["text"] for n in invocation.get("toolExecutionNotifications", [])]
    cut = sum("the audit was cut short" in n for n in notes)  # random weights rarely stop within 24 tokens
    assert len(notes) == cut, notes  # nothing else went wrong
    assert result.returncode == (2 if cut else 1 if run["results"] else 0), result.stderr
    assert invocation["executionSuccessful"] is (cut == 0) and invocation["exitCode"] == result.returncode
    for r in run["results"]:  # whatever it said passed the same validation as in the editor
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] in (
            "src/net/parse.c",
            "src/net/proto.h",
            "lib/util.c",
        )
    assert (stats(again)["cached"], stats(again)["audited"]) == (corpus.UNITS - cut, cut)  # only complete ones stored
