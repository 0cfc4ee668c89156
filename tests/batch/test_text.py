"""`k3lsp audit`'s text report on a terminal, as compilers print diagnostics: the location line, the message, the
source line with a caret under the range, the trace as notes and the fix; piped, the location lines alone; with
`-o FILE`, a summary on stderr. A real scripted daemon whose findings are known in advance (tests/batch/corpus.py);
the terminal is a pseudo-terminal from ``pty.openpty()``."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from dataclasses import astuple

from rich.cells import cell_len

from k3lsp.cli import batch
from k3lsp.findings import report
from tests.batch import corpus
from tests.support.batch import TIMEOUT, k3lsp, k3lsp_env


def on_a_terminal(*args: str, cache, cwd) -> tuple[int, str, str]:
    """`k3lsp ARGS` with stdout on a pseudo-terminal: (exit status, what the terminal showed, stderr)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "k3lsp.cli", *args], stdout=follower, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=k3lsp_env(cache), cwd=cwd)  # fmt: skip
    os.close(follower)
    shown, deadline = b"", time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        err = proc.stderr.read().decode()
        status = proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(leader)
    return status, shown.decode().replace("\r\n", "\n"), err


def test_on_a_terminal_findings_read_like_a_compilers(corpus_daemon, tmp_path):
    corpus.tree(tmp_path)
    status, shown, err = on_a_terminal("audit", "proj", "--endpoint", corpus_daemon.endpoint, cache=tmp_path / "c",
                                       cwd=tmp_path)  # fmt: skip
    assert status == 1, err
    memcpy = corpus.line_of(corpus.PARSE_C, "memcpy(")
    head = corpus.line_of(corpus.PARSE_C, "static int parse_header")
    index = corpus.line_of(corpus.PARSE_C, "return table[i]")
    decl = corpus.line_of(corpus.PROTO_H, "int v;")
    code = "memcpy(p->data, in, n); /* größe ≠ 😀 */"
    fixed = "memcpy(p->data, in, min_t(int, n, sizeof(p->data)));"
    parse = "proj/src/net/parse.c"
    expected = [
        f"{parse}:{memcpy}:2: high CWE-787 memcpy overflows data",
        "    n is not checked against sizeof(p->data)",
        f"{memcpy:>5} |         {code}",
        "      |         ^" + "~" * len(code),  # one more cell than characters: the emoji is two cells wide
        f"{parse}:{head}:1: note: n comes from the caller",
        f"{parse}:{memcpy}:2: note: copied without a bound",
        f"{parse}:{memcpy}:1: fix: replace line {memcpy} with:",
        f"{memcpy:>5} |         {fixed}",
        f"{parse}:{index}:2: medium CWE-125 unchecked index",
        "    i is not bounded",
        f"{index:>5} |         return table[i];",
        "      |         ^" + "~" * len("eturn table[i];"),
        f"proj/src/net/proto.h:{decl}:2: low CWE-457 v is read uninitialised",
        f"{decl:>5} |         int v;",
        "      |         ^" + "~" * len("nt v;"),  # over two lines: marked to the end of the first
        f"proj/src/net/proto.h:{decl}:2: note: declared without a value",
        f"proj/src/net/proto.h:{decl + 1}:2: note: returned",
    ]
    lines = shown.rstrip("\n").split("\n")
    assert lines[:-1] == expected, "\n".join(lines)
    assert lines[-1].startswith("k3lsp audit: 3 files, 5 units, 5 audited, 0 cached, 0 failed, 3 findings")


def test_piped_each_finding_is_one_line_and_with_o_the_summary_goes_to_stderr(corpus_daemon, tmp_path):
    corpus.tree(tmp_path)
    common = ("audit", "proj", "--endpoint", corpus_daemon.endpoint)
    piped = k3lsp(*common, cache=tmp_path / "c", cwd=tmp_path)
    assert piped.returncode == 1, piped.stderr
    lines = piped.stdout.strip().split("\n")
    assert [line.split(": ", 1)[1] for line in lines[:-1]] == [
        "high CWE-787 memcpy overflows data",
        "medium CWE-125 unchecked index",
        "low CWE-457 v is read uninitialised",
    ]
    written = k3lsp(*common, "--format", "sarif", "-o", "audit.sarif", cache=tmp_path / "c", cwd=tmp_path)
    assert written.returncode == 1 and written.stdout == "", written.stderr
    assert written.stderr.strip().split("\n")[-1] == (
        "k3lsp audit: 3 findings (1 high, 1 medium, 1 low) in audit.sarif; 3 files, 5 units, 0 audited, 5 cached, "
        "0 failed, 3 findings, 0 suppressed, 0 baselined, 0 refuted, 0 tokens, 0 incomplete"
    )


def test_a_hostile_source_line_reaches_the_terminal_as_text_with_the_caret_still_under_its_column(tmp_path):
    """The quoted line is the audited tree's: an escape sequence or a bidi control in it must not reach the
    terminal, and whatever replaces it keeps one cell per character so the caret stays under the range."""
    source = tmp_path / "evil.c"
    source.write_text("int f(void)\n{\n\t/*\x1b]0;owned\x07\u202e*/ return 中[x];\n}\n")
    line = "\t/*\x1b]0;owned\x07\u202e*/ return 中[x];"
    start = line.index("中") + 1  # 1-based UTF-16 column of the range: 中[x]
    span = report.Span(3, start, 3, start + len("中[x]"))
    found = report.Reported(
        str(source), "evil.c", *astuple(span), "high", 125, "read out of bounds\x1b[2J", "x \x1b[31mis\x1b[0m big",
        "f", "0" * 32, trace=(report.Step(span, "indexed\u202e here"),),
    )  # fmt: skip
    out = io.StringIO()
    batch.print_text(batch.BatchReport(tmp_path, 1, 1, [found]), out, detailed=True)
    shown = out.getvalue().split("\n")
    assert not [c for c in out.getvalue() if not c.isprintable() and c != "\n"], shown
    assert shown[2] == "    3 |         /*?]0;owned??*/ return 中[x];"
    assert shown[3] == "      | " + " " * (8 + len("/*?]0;owned??*/ return ")) + "^~~~~"  # 中 is two cells wide
    assert shown[3].index("^") == cell_len(shown[2][: shown[2].index("中")])
    assert shown[4] == f"{source}:3:{start}: note: indexed here"
