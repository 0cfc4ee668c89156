"""compare against the tiny checkpoint's BASE: itself, a pruned child, and sampled sessions."""

import json
import subprocess
import sys

import numpy as np

from backend.dist import load_tokenizer
from backend.fidelity.compare import compare
from backend.fidelity.spans import SPANS
from backend.fidelity.store import Base
from backend.fidelity.traces import read_sessions
from backend.prompts import AUDIT_TOOLS
from tests.support.spans_oracle import expected_labels


def _rows(report: dict) -> dict:
    return {
        **{f"corpus {k}": v for k, v in report["corpora"].items()},
        **{f"span {k}": v for k, v in report["spans"].items()},
    }


def test_checkpoint_against_itself(tiny_model, tiny_base):
    report = compare(str(tiny_model), str(tiny_base), trust_remote_code=True)
    assert set(report["corpora"]) == {"traces", "kernel", "all"}
    for name, row in _rows(report).items():
        assert row["tokens"] > 0, name
        assert row["kld_mean"] == 0.0 and row["kld_median"] == 0.0, name
        assert row["top1_agreement"] == 1.0 and row["kld_under_0.01"] == 1.0, name
        assert row["ppl_ratio"] == 1.0 and row["ppl_ref"] == row["ppl_cand"], name


def test_pruned_against_its_parent_diverges_on_every_span(tiny_model, pruned_model, tiny_base, trace_file):
    report = compare(str(pruned_model), str(tiny_base), trust_remote_code=True)
    for name, row in _rows(report).items():
        assert row["kld_mean"] > 0 and row["kld_median"] > 0, name
        assert row["ppl_ratio"] != 1.0, name
        assert row["top1_agreement"] < 1.0, name
    # The spans the tables are tallied on are the ones the text of the known session says.
    ((_, session),) = read_sessions(trace_file)
    tok = load_tokenizer(str(tiny_model), trust_remote_code=True)
    ids, expected = expected_labels(tok, session["messages"], AUDIT_TOOLS, session["thinking_effort"])
    base = Base(tiny_base)
    assert base.header.windows[0].corpus == "traces" and base.ids(0) == ids
    assert np.array_equal(np.asarray(base.records(0)["label"]), expected[1:])
    for k, name in enumerate(SPANS):
        assert report["spans"][name]["tokens"] == expected[1:].count(k) > 0
    assert report["spans"]["all"]["tokens"] == len(ids) - 1


def test_cli_json_with_generated_sessions(tiny_model, tiny_base):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "fidelity",
            "compare",
            "--trust-remote-code",
            "--model",
            str(tiny_model),
            "--base",
            str(tiny_base),
            "--json",
            "--generate",
            "3",
            "--max-tokens",
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    report = json.loads(out.stdout)
    gen = report["generate"]
    assert gen["sessions"] == 3 and (gen["temp"], gen["top_p"]) == (1.0, 0.95)
    assert sum(gen["finish"].values()) == 3 and gen["finish"]["error"] == 0
    assert gen["stop_share"] == gen["finish"]["stop"] / 3 and gen["loop_rate"] == gen["finish"]["loop"] / 3
    assert report["spans"]["all"]["kld_mean"] == 0.0


def test_tables_name_every_span_and_corpus(tiny_model, tiny_base):
    from backend.fidelity.report import render

    text = render(compare(str(tiny_model), str(tiny_base), trust_remote_code=True))
    for label in (
        "Perplexity per corpus",
        "kernel",
        "traces",
        "tool call",
        "think",
        "response",
        "other",
        "all tokens",
        "median KLD",
        "KLD<0.01",
        "top-16",
    ):
        assert label in text
