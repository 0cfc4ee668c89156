"""The findings pipeline: the language server and the batch CLI report the same findings for the same results."""

import pytest

from k3lsp.cli import batch
from k3lsp.core.options import Options
from k3lsp.findings import model as findings
from k3lsp.findings import suppress
from k3lsp.findings.report import Span
from k3lsp.lsp import actions, documents
from k3lsp.wire import protocol
from k3lsp.wire.bounds import fit_lines

SOURCE = """\
#include <string.h>

int copy(char *dst, const char *src, int n)
{
\tint m = n * 4;
\t/* k3-audit: ignore CWE-787 */
\tif (m > 0)
\t\tmemcpy(dst, src, m);
\treturn m;
}

void greet(char *out)
{
\tstrcpy(out, "h\U0001f600llo");
}
"""
# copy: file lines 3-10 (1-based), unit lines 1-8. greet: file lines 12-15, unit lines 1-4.


def finding(cwe, severity, start, end, **more):
    return {
        "cwe": cwe,
        "severity": severity,
        "title": f"CWE-{cwe} here",
        "message": "why",
        "start_line": start,
        "end_line": end,
        "trace": [],
    } | more


COPY = [
    finding(
        120,
        "high",
        6,
        6,  # the memcpy: kept, with a trace (one step past the unit, dropped) and a fix
        trace=[{"line": 1, "note": "n from the caller"}, {"line": 6, "note": "copied"}, {"line": 99, "note": "x"}],
        fix={"start_line": 5, "end_line": 6, "replacement": "\tif (m > 0 && m <= 64)\n\t\tmemcpy(dst, src, m);"},
    ),
    finding(787, "high", 5, 6),  # silenced by the comment on the line above
    finding(190, "medium", 3, 3),  # in the baseline
    finding(476, "info", 5, 5),  # below minSeverity low
    finding(121, "critical", 6, 9),  # past the unit's 8 lines: dropped
]
GREET = [
    finding(
        242,
        "critical",
        2,
        3,  # the brace to the line with a non-BMP character (two UTF-16 units)
        fix={"start_line": 3, "end_line": 3, "replacement": '\tstrncpy(out, "hello", 6);'},
    )
]


@pytest.fixture
def tree(tmp_path):
    path = tmp_path / "copy.c"
    path.write_text(SOURCE)
    (source,), errors, _ = batch.read_sources([path], tmp_path)
    assert errors == [] and [u.name for u in source.units] == ["copy", "greet"]
    copy = source.units[0]
    baseline = suppress.Baseline(tmp_path / suppress.BASELINE_NAME)
    in_baseline = findings.validate(COPY[2], copy)
    baseline.add(findings.fingerprint(in_baseline, copy), 190, in_baseline.title, "copy.c")
    return path, source, baseline, results_for(source)


def results_for(source: batch.Source) -> dict[str, list[dict]]:
    """The raw results of each unit, filed under its key (its content) as the cache files them."""
    return {u.key: {"copy": COPY, "greet": GREET}[u.name] for u in source.units}


def test_the_server_and_the_batch_cli_report_the_same_findings(tree):
    path, source, baseline, results = tree
    options = Options(min_severity="low")
    uri = path.as_uri()

    view = documents.View(options, baseline, related_information=True)
    shown, silenced = documents.present(uri, SOURCE, source.units, results, view)
    every = [
        row
        for unit in source.units
        for row in batch.reported(source, unit, results[unit.key], options.min_severity, baseline)
    ]
    rows = [r for r in every if r.suppression is None]

    # what the pipeline keeps: not the silenced, baselined, too mild or out-of-range ones; those silenced, counted
    assert [(r.cwe, r.suppression) for r in every if r.suppression] == [(787, "inSource"), (190, "external")]
    assert silenced == documents.Silenced(suppressed=1, baselined=1)
    assert [(s.finding.cwe, s.unit.name) for s in shown] == [(120, "copy"), (242, "greet")]
    assert [(r.cwe, r.unit) for r in rows] == [(120, "copy"), (242, "greet")]
    assert [s.fingerprint for s in shown] == [r.fingerprint for r in rows]
    assert [s.diagnostic.data["fingerprint"] for s in shown] == [r.fingerprint for r in rows]

    # the same places: the editor's 0-based ranges are the report's 1-based spans, counted by hand here
    memcpy, strcpy = rows
    assert Span(memcpy.line, memcpy.column, memcpy.end_line, memcpy.end_column) == Span(8, 3, 8, 23)
    assert [(s.span, s.note) for s in memcpy.trace] == [
        (Span(3, 1, 3, 44), "n from the caller"),
        (Span(8, 3, 8, 23), "copied"),
    ]
    assert memcpy.fix is not None and memcpy.fix.span == Span(7, 1, 8, 23)
    assert Span(strcpy.line, strcpy.column, strcpy.end_line, strcpy.end_column) == Span(13, 1, 14, 24)
    assert strcpy.trace == () and strcpy.fix is not None and strcpy.fix.span == Span(14, 1, 14, 24)
    for s, r in zip(shown, rows, strict=True):
        assert Span.of(s.diagnostic.range) == Span(r.line, r.column, r.end_line, r.end_column)
        related = s.diagnostic.related_information or []
        assert [(Span.of(i.location.range), i.message) for i in related] == [(t.span, t.note) for t in r.trace]
        offered = actions.for_finding(s, uri, SOURCE.split("\n"))
        fixes = [e for a in offered if a.is_preferred for e in a.edit.changes[uri]]
        assert [(Span.of(e.range), e.new_text) for e in fixes] == (
            [] if r.fix is None else [(r.fix.span, r.fix.replacement)]
        )

    # the same text for a person: title, message, severity, CWE
    assert [(s.finding.title, s.finding.message, s.finding.severity) for s in shown] == [
        (r.title, r.message, r.severity) for r in rows
    ]


def test_without_the_comment_and_the_baseline_both_report_what_they_silenced(tree):
    """The suppression and the baseline are the pipeline's, not a front end's: lifting them changes both alike."""
    path = tree[0]
    text = SOURCE.replace("/* k3-audit: ignore CWE-787 */", "/* reviewed */")
    path.write_text(text)
    (source,), _, _ = batch.read_sources([path], path.parent)
    results = results_for(source)
    shown, _ = documents.present(
        path.as_uri(), text, source.units, results, documents.View(Options(min_severity="low"))
    )
    rows = [row for u in source.units for row in batch.reported(source, u, results[u.key], "low", None)]
    assert [s.finding.cwe for s in shown] == [r.cwe for r in rows] == [120, 787, 190, 242]
    assert [s.fingerprint for s in shown] == [r.fingerprint for r in rows]


def test_one_line_check_for_the_daemon_and_the_editor():
    """``fit_lines`` says what names a line past the unit: the daemon drops such a finding, the editor keeps it
    without the stray parts."""
    stray = protocol.validate_finding(COPY[0])
    fitted, cut = fit_lines(stray, 8)
    assert cut == ["trace[2].line 99 is outside the unit's 8 lines"]
    assert fitted["trace"] == stray["trace"][:2] and fitted["fix"] == stray["fix"] and "fix" in stray
    _, cut = fit_lines(stray | {"start_line": 1, "end_line": 5}, 5)
    assert cut == [
        "trace[1].line 6 is outside the unit's 5 lines",
        "trace[2].line 99 is outside the unit's 5 lines",
        "fix.lines 5-6 are outside the unit's 5 lines",
    ]
    with pytest.raises(protocol.ProtocolError, match="lines 6-9 are outside the unit's 8 lines"):
        fit_lines(protocol.validate_finding(COPY[4]), 8)
