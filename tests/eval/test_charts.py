"""The eval's charts are read at a normal size: a CASTLE-sized recall chart (25 CWEs) is 960 px wide whatever the
number of configurations, its labels level, with a title, and a legend (two configurations) or a panel titled
with each (more); a zero, which has no bar, still shows its count in the bar's colour. The chart used to be
thousands of pixels wide, with rotated labels and invisible zero bars."""

import struct
from dataclasses import asdict

import pytest

from k3lsp.eval import charts
from k3lsp.eval.castle import PAPER_ROWS

pytest.importorskip("matplotlib")

CWES = [20, 22, 78, 89, 119, 120, 121, 122, 125, 134, 190, 191, 253, 401, 415, 416, 457, 476, 562, 590, 617, 676,
        704, 787, 835]  # fmt: skip
EFFORTS = ("off", "low", "high", "max", "auto")


def cwe_rows(k: int) -> list[dict]:
    """Per CWE, 5 vulnerable tests of which configuration ``k`` found a varying number; of CWE-20, none."""
    rows = []
    for i, cwe in enumerate(CWES):
        tp = 0 if cwe == 20 else min((i + k) % 6, 5)
        rows.append({"cwe": cwe, "tests": 8, "vulnerable": 5, "tp": tp, "fn": 5 - tp, "fp": 0, "recall": tp / 5})
    return rows


def castle_report(n: int) -> dict:
    configurations = [{"name": f"effort={e}", "score": {"score": 700 + k}, "by_cwe": cwe_rows(k)} for k, e in
                      enumerate(EFFORTS[:n])]  # fmt: skip
    return {"configurations": configurations, "paper": [asdict(p) for p in PAPER_ROWS], "perfect": {"score": 1350}}


def fixes_report(n: int) -> dict:
    none = {"caught": 0, "judged": 3, "rate": 0.0, "wilson95": [0.0, 0.56]}
    half = {"caught": 2, "judged": 4, "rate": 0.5, "wilson95": [0.15, 0.85]}
    return {"configurations": [{"name": f"effort={e}", "directories": {"net/core": none, "fs/ext4": half}} for e in
                               EFFORTS[:n]]}  # fmt: skip


def figures(n: int) -> dict:
    return charts.castle_figures(castle_report(n)) | charts.fixes_figures(fixes_report(n))


def png_size(path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


@pytest.fixture(autouse=True)
def closed():
    yield
    charts._pyplot().close("all")


@pytest.mark.parametrize("n", [1, 2, 5])
def test_every_chart_has_a_title_level_labels_and_names_its_configurations(n):
    found = figures(n)
    assert set(found) == {"castle-score.png", "castle-cwe-recall.png", "fixes-subsystems.png"}
    for name, fig in found.items():
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert fig.get_suptitle() or axes[0].get_title(), name
        for ax in axes:
            assert all(label.get_rotation() == 0 for label in ax.get_yticklabels() + ax.get_xticklabels()), name
        if name != "castle-score.png":  # the configurations: in a legend, or one panel each
            legend = axes[0].get_legend()
            named = [t.get_text() for t in legend.get_texts()] if legend else [ax.get_title() for ax in axes]
            assert named == [f"effort={e}" for e in EFFORTS[:n]], name
    assert found["castle-score.png"].axes[0].get_legend() is not None  # ours, the paper's analyzers, its LLMs


@pytest.mark.parametrize("n", [2, 5])
def test_a_zero_is_seen_in_its_bars_colour(n):
    for ax in figures(n)["castle-cwe-recall.png"].axes:
        if not ax.get_visible():
            continue
        colours = {tuple(bar.get_facecolor()) for bar in ax.patches}
        zeros = [t for t in ax.texts if t.get_text() == " 0/5"]
        assert len(zeros) >= len(colours)  # CWE-20: none found by any configuration
        assert {tuple(t.get_color()) for t in zeros} == colours


def test_the_files_are_a_normal_size_however_many_configurations(tmp_path):
    for n in (2, 5):  # one chart with a legend, and panels
        out = tmp_path / str(n)
        out.mkdir()
        for path in charts.castle(castle_report(n), out) + charts.fixes(fixes_report(n), out):
            width, height = png_size(path)
            assert width == 960 and height < 1600, (n, path.name, width, height)


def test_nothing_judged_draws_nothing(tmp_path):
    assert charts.fixes({"configurations": []}, tmp_path) == []  # --cases-only
    assert charts.fixes({"configurations": [{"name": "default", "directories": {}}]}, tmp_path) == []


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("rows", ["fixes-subsystems.png", "castle-cwe-recall.png"])
def test_the_legend_is_below_the_axis_label_and_inside_the_file(n, rows, tmp_path):
    """Two subsystems made a chart a few rows high, and its legend sat on the axis label (it was placed at a
    fraction of the axes' height, which is small there)."""
    fig = figures(n)[rows]
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend, label = ax.get_legend().get_window_extent(renderer), ax.xaxis.label.get_window_extent(renderer)
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert legend.y1 <= label.y0 and all(legend.y1 <= t.y0 for t in ticks), (legend, label)
    assert legend.y0 >= 0 and fig.bbox.contains(legend.x0, legend.y0), (legend, fig.bbox)
