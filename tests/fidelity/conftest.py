"""A known audit session, and the tiny checkpoint's BASE recorded on it once per test session."""

import json
from pathlib import Path

import pytest

from backend.prompts import SYSTEM_PROMPT

FINDING = {
    "cwe": 787,
    "severity": "high",
    "title": "Out-of-bounds write",
    "message": "len is not checked",
    "start_line": 3,
    "end_line": 3,
    "trace": [{"line": 1, "note": "len from the caller"}],
}

# A session as `serve --trace-file` writes it, in the release's Kimi K3 format: every span kind, with
# boundaries known from the text: think (reasoning_content), tool calls (JSON-text and object arguments), a
# tool result, and responses.
SESSION = {
    "id": "known-spans",
    "thinking_effort": "high",
    "messages": [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Audit:\n```c\n1| void f(char *p, int len)\n2| {\n3| \tmemcpy(buf, p, len);\n```"},
        {
            "role": "assistant",
            "reasoning_content": "len is unchecked; see who calls f.",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "grep", "arguments": '{"pattern": "f\\\\("}'}}],
        },
        {"role": "tool", "tool_call_id": "1", "name": "grep", "content": "src/a.c:9: f(user, n);"},
        {
            "role": "assistant",
            "reasoning_content": "The caller passes user data.",
            "content": "The caller passes n from user space.",
            "tool_calls": [{"type": "function", "function": {"name": "report_finding", "arguments": FINDING}}],
        },
        {"role": "tool", "tool_call_id": "1", "name": "report_finding", "content": "ok"},
        {"role": "assistant", "content": "One finding."},
    ],
}
WINDOW = 4096  # the whole session (its tool schemas included): the scanner is checked on every token


@pytest.fixture(scope="session")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "known.jsonl"
    path.write_text(json.dumps(SESSION) + "\n")
    return path


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    corpus = tmp_path_factory.mktemp("corpus") / "kernel"
    corpus.mkdir()
    repo = Path(__file__).resolve().parents[2]
    for name in ("k3demo_syscalls.c", "k3demo.h"):
        (corpus / name).write_text((repo / "examples" / name).read_text())
    return corpus


@pytest.fixture(scope="session")
def tiny_base(tiny_model, trace_file, corpus_dir, tmp_path_factory) -> Path:
    """The tiny checkpoint's BASE on the known session and a two-file corpus (top-16, chunks of 96)."""
    from backend.fidelity.record import record

    out = tmp_path_factory.mktemp("bases") / "tiny.k3fb"
    return record(
        str(tiny_model),
        str(out),
        traces=str(trace_file),
        corpora=[str(corpus_dir)],
        window=WINDOW,
        top_k=16,
        chunk=96,
        trust_remote_code=True,
    )
