"""Reading a CASTLE-format dataset: bad files get a clear error, and what the model is given says nothing of the
labels (program names are hashes of the code, not CASTLE's `CASTLE-<cwe>-<n>.c`)."""

from __future__ import annotations

import json
import re

import pytest

from k3lsp.eval import castle
from tests.eval import castle_data as data


def test_programs_are_named_by_a_hash_of_their_code_and_carry_only_the_code(tmp_path):
    ds = castle.load(data.write(tmp_path / "d.json", data.dataset()))
    programs = ds.programs()
    assert [p.test_id for p in programs] == [c.id for c in data.CASES]
    for program, case in zip(programs, data.CASES, strict=True):
        assert re.fullmatch(r"[0-9a-f]{16}\.c", program.name), program.name
        assert str(case.cwe) not in program.name.removesuffix(".c").split("-")
        assert program.code == case.code
    assert programs == castle.load(tmp_path / "d.json").programs()  # the same names on every run


def test_two_tests_with_the_same_code_get_two_names(tmp_path):
    twin = data.Case("22-3", 22, data.SERVE_FILE, "serve_file", 'FILE *f = fopen(path, "r");')
    ds = castle.load(data.write(tmp_path / "d.json", data.dataset((*data.CASES[:1], twin))))
    first, second = ds.programs()
    assert first.code == second.code and first.name != second.name


def test_the_dataset_is_named_by_its_digest_and_counts_its_tests(tmp_path):
    path = data.write(tmp_path / "d.json", data.dataset())
    ds = castle.load(path)
    assert (len(ds.tests), ds.vulnerable, ds.name, ds.version) == (6, 4, "hand-made", "t1")
    assert len(ds.digest) == 64
    assert ds.families[787] == {787, 119, 121, 122}


def _broken(tmp_path, change) -> str:
    raw = data.dataset()
    change(raw)
    with pytest.raises(castle.DatasetError) as caught:
        castle.load(data.write(tmp_path / "bad.json", raw))
    return str(caught.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.pop("tests"), "non-empty list 'tests'"),
        (lambda d: d["tests"][1].pop("code"), "tests[1] (787-1): 'code'"),
        (lambda d: d["tests"][2].update(lines=[0]), "tests[2] (416-1): 'lines'"),
        (lambda d: d["tests"][0].update(vulnerable="yes"), "'vulnerable' must be true or false"),
        (lambda d: d["tests"][0].update(cwe="22"), "'cwe' must be a positive integer"),
        (lambda d: d["tests"][3].update(id="22-1"), "repeated: 22-1"),
        (lambda d: d["cwes"].pop("476"), "no entry for CWE 476"),
        (lambda d: d["cwes"]["22"].update(parents=["668"]), "cwes['22']: 'parents'"),
        (lambda d: d.pop("cwes"), "'cwes' must map"),
    ],
)
def test_a_broken_dataset_is_refused_with_where_it_is_broken(tmp_path, change, says):
    assert says in _broken(tmp_path, change)


def test_a_file_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "d.json"
    path.write_text("{not json")
    with pytest.raises(castle.DatasetError, match="is not JSON"):
        castle.load(path)
    with pytest.raises(castle.DatasetError, match="cannot read"):
        castle.load(tmp_path / "missing.json")


def test_the_paper_rows_add_up_as_printed():
    """The paper prints P, R and A rounded: ours, computed from its counts, round to the same."""
    printed = {"ESBMC": (82, 35, 58), "Cppcheck": (78, 12, 46), "GPT-o3 Mini": (63, 81, 64), "GPT-4o": (44, 75, 47)}
    rows = {r.name: r for r in castle.PAPER_ROWS}
    for name, (p, r, a) in printed.items():
        row = rows[name]
        assert round(100 * row.tp / (row.tp + row.fp)) == p
        assert round(100 * row.tp / (row.tp + row.fn)) == r
        assert round(100 * (row.tp + row.tn) / (row.tp + row.tn + row.fp + row.fn)) == a
    assert json.dumps([r.score for r in castle.PAPER_ROWS]) == "[697, 600, 594, 523, 486, 405, 381, 955, 930, 888, 814]"
