"""`k3lsp audit` thinks at high effort unless told (`--thinking-effort`), and the daemon runs it so (its trace)."""

from __future__ import annotations

from tests.batch import corpus
from tests.support.batch import k3lsp


def test_batch_audits_think_at_high_effort_unless_told(corpus_daemon, tmp_path):
    corpus.tree(tmp_path)
    common = ("audit", "proj/lib", "--endpoint", corpus_daemon.endpoint, "--json")
    default = k3lsp(*common, cache=tmp_path / "c1", cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    told = k3lsp(*common, "--thinking-effort", "off", cache=tmp_path / "c2", cwd=tmp_path)
    assert told.returncode == 0, told.stderr
    assert [s["thinking_effort"] for s in corpus_daemon.sessions("add")][-2:] == ["high", "off"]
    refused = k3lsp(*common, "--thinking-effort", "medium", cache=tmp_path / "c3", cwd=tmp_path)
    assert refused.returncode == 2 and "--thinking-effort" in refused.stderr
