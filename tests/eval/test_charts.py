"""The eval's charts are read at a normal size: a CASTLE-sized recall chart (25 CWEs, three configurations) is
960 px wide, its labels horizontal, with a title and a legend, and a zero (no bar) still shows its count in the
configuration's colour. It used to be 4,050 px wide with rotated labels and invisible zero bars."""

import struct
from dataclasses import asdict

import pytest

from k3lsp.eval.castle import PAPER_ROWS

charts = pytest.importorskip("k3lsp.eval.charts")
pytest.importorskip("matplotlib")

CWES = [20, 22, 78, 89, 119, 120, 121, 122, 125, 134, 190, 191, 253, 401, 415, 416, 457, 476, 562, 590, 617, 676,
        704, 787, 835]  # fmt: skip
CONFIGURATIONS = ("effort=low", "effort=high", "effort=max")


def cwe_rows(k: int) -> list[dict]:
    """Per CWE, 5 vulnerable tests of which configuration ``k`` found a varying number; CWE-20 none by any."""
    rows = []
    for i, cwe in enumerate(CWES):
        tp = 0 if cwe == 20 else (i + k) % 6
        rows.append({"cwe": cwe, "tests": 8, "vulnerable": 5, "tp": min(tp, 5), "fn": 5 - min(tp, 5), "fp": 0,
                     "recall": min(tp, 5) / 5})  # fmt: skip
    return rows


def castle_report() -> dict:
    configurations = [{"name": n, "score": {"score": 700 + k}, "by_cwe": cwe_rows(k)} for k, n in
                      enumerate(CONFIGURATIONS)]  # fmt: skip
    return {"configurations": configurations, "paper": [asdict(p) for p in PAPER_ROWS], "perfect": {"score": 1350}}


def fixes_report() -> dict:
    rate = {"caught": 0, "judged": 3, "rate": 0.0, "wilson95": [0.0, 0.56]}
    found = {"caught": 2, "judged": 4, "rate": 0.5, "wilson95": [0.15, 0.85]}
    return {"configurations": [{"name": n, "directories": {"net/core": rate, "fs/ext4": found}} for n in
                               CONFIGURATIONS]}  # fmt: skip


def png_size(path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def readable(fig) -> None:
    (ax,) = fig.axes
    assert ax.get_title()
    assert ax.get_legend() is not None and ax.get_legend().get_texts()
    assert all(label.get_rotation() == 0 for label in ax.get_yticklabels() + ax.get_xticklabels())


def test_every_chart_has_a_title_a_legend_and_level_labels():
    figures = charts.castle_figures(castle_report()) | charts.fixes_figures(fixes_report())
    assert set(figures) == {"castle-score.png", "castle-cwe-recall.png", "fixes-subsystems.png"}
    for fig in figures.values():
        readable(fig)
    charts._pyplot().close("all")


def test_a_zero_is_seen_in_the_configurations_colour():
    figures = charts.castle_figures(castle_report())
    ax = figures["castle-cwe-recall.png"].axes[0]
    zeros = [t for t in ax.texts if t.get_text() == " 0/5"]
    legend = {
        t.get_text(): h.get_facecolor()
        for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles, strict=True)
    }
    assert len(zeros) >= len(CONFIGURATIONS)  # CWE-20: none found by any configuration
    assert {tuple(t.get_color()) for t in zeros} == {tuple(legend[n]) for n in CONFIGURATIONS}
    charts._pyplot().close("all")


def test_the_files_are_a_normal_width_however_many_rows(tmp_path):
    paths = charts.castle(castle_report(), tmp_path) + charts.fixes(fixes_report(), tmp_path)
    for path in paths:
        width, height = png_size(path)
        assert width == 960 and height < 2400, (path.name, width, height)


def test_nothing_reviewed_draws_nothing(tmp_path):
    assert charts.fixes({"configurations": []}, tmp_path) == []
