"""diffing: diagnostics follow the edits between saves, or disappear."""

from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types as lsp

from k3lsp.findings import model as findings
from k3lsp.lsp import convert, diffing
from k3lsp.units import split as units
from tests.lsp.conftest import example_text
from tests.support.edits import apply_change

SOURCE = example_text("k3demo_syscalls.c")


def change(sl, sc, el, ec, text):
    return lsp.TextDocumentContentChangePartial(range=lsp.Range(lsp.Position(sl, sc), lsp.Position(el, ec)), text=text)


def anchors():
    return [diffing.Anchor.on(u, u.name) for u in units.split(SOURCE)]  # units at 24-36, 41-62, 64-78 (0-based)


def follow(*changes):
    return {a.item: (a.unit_start, a.shift) for a in diffing.follow_edits(anchors(), changes)}


def test_lines_inserted_or_removed_above_shift_the_unit():
    assert follow(change(0, 0, 0, 0, "// new\n// lines\n")) == {
        "k3demo_alloc_table": (26, 2),
        "sys_k3demo_set_rules": (43, 2),
        "sys_k3demo_flush_tables": (66, 2),
    }
    # Deleting the comment block above the syscall (file lines 38-41 1-based) moves the two below it.
    assert follow(change(37, 0, 41, 0, "")) == {
        "k3demo_alloc_table": (24, 0),
        "sys_k3demo_set_rules": (37, -4),
        "sys_k3demo_flush_tables": (60, -4),
    }
    # Enter at the end of the blank line right above a function; a line typed right at its start.
    assert follow(change(63, 0, 63, 0, "\n"))["sys_k3demo_flush_tables"] == (65, 1)
    assert follow(change(64, 0, 64, 0, "/* above */\n"))["sys_k3demo_flush_tables"] == (65, 1)


def test_edits_inside_a_unit_drop_it_and_edits_below_do_nothing():
    inside = follow(change(46, 1, 46, 1, "  "))
    assert "sys_k3demo_set_rules" not in inside and inside["sys_k3demo_flush_tables"] == (64, 0)
    assert "sys_k3demo_flush_tables" not in follow(change(64, 0, 64, 0, "static "))  # prefixes its first line
    assert "k3demo_alloc_table" not in follow(change(22, 5, 24, 0, ""))  # joins a line onto its first line
    last = SOURCE.split("\n")[36]
    assert last == "}"
    kept = follow(change(36, 1, 36, 1, "\n\nstatic int x;"))  # Enter after the closing brace, then type
    assert kept["k3demo_alloc_table"] == (24, 0) and kept["sys_k3demo_set_rules"] == (43, 2)
    assert "k3demo_alloc_table" not in follow(change(36, 1, 36, 1, " /* x */"))  # appended to its last line


def test_whole_document_change_drops_everything_and_changes_apply_in_order():
    whole = lsp.TextDocumentContentChangeWholeDocument(text="int x;\n")
    assert diffing.follow_edits(anchors(), [whole]) == []
    # Two changes: the second's coordinates are in the text after the first.
    assert follow(change(0, 0, 0, 0, "\n"), change(65, 0, 65, 0, "x"))["k3demo_alloc_table"] == (25, 1)
    assert "sys_k3demo_flush_tables" not in follow(change(0, 0, 0, 0, "\n"), change(65, 0, 65, 0, "x"))


def test_shifted_diagnostic_moves_with_its_trace():
    unit = units.split(SOURCE)[1]
    f = findings.validate(
        {
            "cwe": 862,
            "severity": "high",
            "title": "missing capability check",
            "message": "",
            "start_line": 1,
            "end_line": 2,
            "trace": [{"line": 13, "note": "copy"}],
        },
        unit,
    )
    d = convert.diagnostic(f, unit, "file:///k.c")
    moved = diffing.shifted(d, 3)
    assert moved.range.start.line == d.range.start.line + 3 and moved.range.end.character == d.range.end.character
    assert moved.related_information[0].location.range.start.line == 41 + 12 + 3
    assert moved.data == d.data and diffing.shifted(d, 0) is d


edits = st.lists(
    st.tuples(
        st.integers(0, 90),
        st.integers(0, 12),
        st.integers(0, 3),
        st.integers(0, 12),
        st.sampled_from(["", "\n", "x", "\n\n", "/* c */\n", "}\n{", "int y;\n"]),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(edits)
def test_a_surviving_anchor_always_points_at_its_unchanged_text(ops):
    """The property that matters: a diagnostic kept between saves never points at the wrong line."""
    text = SOURCE
    originals = {u.name: u for u in units.split(SOURCE)}
    current = anchors()
    for sl, sc, span, ec, new in ops:
        lines = text.split("\n")
        sl = min(sl, len(lines) - 1)
        el = min(sl + span, len(lines) - 1)
        sc = min(sc, len(lines[sl]))
        ec = min(ec, len(lines[el])) if el > sl else max(sc, min(ec, len(lines[el])))
        c = change(sl, sc, el, ec, new)
        current = diffing.follow_edits(current, [c])
        text = apply_change(text, c.range, new)
    lines = text.split("\n")
    for a in current:
        unit = originals[a.item]
        assert "\n".join(lines[a.unit_start : a.unit_end + 1]) == unit.text
        assert a.unit_start == unit.start_line + a.shift
