"""The report's PNG charts, drawn from its JSON with matplotlib (the ``eval`` extra: ``uv sync --extra eval``).

CASTLE: the score of each configuration beside the paper's rows (analyzers and LLMs coloured apart, as the paper
colours them), and the recall per CWE. Fixes: the catch rate per subsystem with its 95 % Wilson interval.
Without matplotlib the report is written all the same and says how to get the charts.

Every chart is read at a normal size: horizontal bars, so labels are never rotated and the figure grows in
height with the rows (a page scrolls down), never in width; a title; a legend for what the colours are, or a
panel per configuration when there are more than two; and the count beside each bar (``2/5``), in its colour,
so a zero, which has no bar, is still seen.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = "charts need matplotlib: uv sync --extra eval (or pip install 'k3lsp[eval]')"
COLOURS = {"analyzer": "#648fff", "llm": "#ffcc00", "ours": "#dc267f"}  # the paper's palette, ours apart
KIND_NAMES = {"ours": "k3lsp (this run)", "analyzer": "analyzers (the paper)", "llm": "LLMs (the paper)"}
WIDTH = 8  # inches: 960 px at DPI, whatever the number of rows or configurations
DPI = 120
GROUPED_AT_MOST = 2  # configurations drawn side by side in one chart; more get a panel each
PANEL_COLUMNS = 3
NOISE = " (random weights: noise)"
LEGEND_BELOW = 36  # points from the axes' bottom to the legend's top: the tick labels (10) and the axis label (8)


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def castle(report: dict, out: Path) -> list[Path]:
    return _save(castle_figures(report), out)


def fixes(report: dict, out: Path) -> list[Path]:
    return _save(fixes_figures(report), out)


def castle_figures(report: dict) -> dict:
    """File name -> matplotlib figure of a CASTLE report (open: `castle` saves and closes them)."""
    plt = _pyplot()
    configs = report["configurations"]
    cwes = [row["cwe"] for row in configs[0]["by_cwe"]] if configs else []
    series = []
    for c in configs:
        rows = {row["cwe"]: row for row in c["by_cwe"]}
        found = [rows[w] for w in cwes]
        notes = [f"{r['tp']}/{r['tp'] + r['fn']}" for r in found]
        series.append(Series(c["name"], [r["recall"] for r in found], notes))
    noise = NOISE if report.get("random_weights") else ""
    recall = _rows(plt, [f"CWE-{w}" for w in cwes], series, "recall: vulnerable tests found (TP / vulnerable)",
                   "CASTLE: recall per CWE" + noise)  # fmt: skip
    return {"castle-score.png": _castle_score(plt, report, noise), "castle-cwe-recall.png": recall}


def fixes_figures(report: dict) -> dict:
    """File name -> figure of a fixes report; none when nothing was judged (--cases-only, or no review whole)."""
    configs = report["configurations"]
    dirs = list(dict.fromkeys(d for c in configs for d in c["directories"]))
    if not dirs:
        return {}
    plt = _pyplot()
    series = []
    for c in configs:
        rates = [c["directories"].get(d) for d in dirs]
        values = [r["rate"] if r else 0.0 for r in rates]
        lo = [v - r["wilson95"][0] if r else 0.0 for v, r in zip(values, rates, strict=True)]
        hi = [r["wilson95"][1] - v if r else 0.0 for v, r in zip(values, rates, strict=True)]
        notes = [f"{r['caught']}/{r['judged']}" if r else "none" for r in rates]
        series.append(Series(c["name"], values, notes, [lo, hi]))
    title = "Fixes: catch rate per subsystem" + (NOISE if report.get("random_weights") else "")
    fig = _rows(plt, dirs, series, "catch rate: caught / judged, with the 95 % Wilson interval", title)
    return {"fixes-subsystems.png": fig}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt


def _castle_score(plt, report: dict, noise: str):
    bars = [(f"k3lsp: {c['name']}", c["score"]["score"], "ours") for c in report["configurations"]]
    bars += [(p["name"], p["score"], p["kind"]) for p in report["paper"]]
    bars.sort(key=lambda b: b[1])
    fig, ax = plt.subplots(figsize=(WIDTH, 0.35 * len(bars) + 1.6))
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[COLOURS[b[2]] for b in bars])
    for i, (_, value, _) in enumerate(bars):
        ax.text(value, i, f" {value}", va="center", size=8)
    perfect = report["perfect"]["score"]
    ax.axvline(perfect, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"CASTLE score (perfect: {perfect}, dashed)")
    ax.set_title("CASTLE: k3lsp beside the paper's rows" + noise)
    kinds = [k for k in KIND_NAMES if any(b[2] == k for b in bars)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in kinds]
    ax.legend(handles, [KIND_NAMES[k] for k in kinds], loc="lower right", fontsize=8)
    return fig


@dataclass
class Series:
    """One configuration's bars: a 0..1 value per label, the count it comes from (shown beside the bar), and
    error bars (below, above) or None."""

    name: str
    values: list[float]
    notes: list[str]
    errors: list[list[float]] | None = None


def _rows(plt, labels: list[str], series: list[Series], xlabel: str, title: str):
    """Horizontal bars of 0..1 values, one row per label (first on top, as in the report's tables). Up to
    GROUPED_AT_MOST configurations share one chart, a bar each per row in the legend's colours; more get a panel
    each (small multiples, PANEL_COLUMNS to a row), so the chart grows with the rows, not rows times
    configurations."""
    if len(series) <= GROUPED_AT_MOST:
        height_in = max(0.3, 0.22 * len(series)) * len(labels) + 1.6
        fig, ax = plt.subplots(figsize=(WIDTH, height_in))
        _bars(ax, labels, series, xlabel)
        if series:  # under the axis label, a distance in points (a fraction of the axes' height: on it, few rows)
            from matplotlib.transforms import offset_copy

            below = offset_copy(ax.transAxes, fig=fig, y=-LEGEND_BELOW, units="points")
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below, fontsize=8,
                      title="configuration", ncol=min(4, len(series)), title_fontsize=8)  # fmt: skip
    else:
        rows = -(-len(series) // PANEL_COLUMNS)
        fig, axes = plt.subplots(rows, PANEL_COLUMNS, sharey=True, squeeze=False,
                                 figsize=(WIDTH, rows * (0.2 * len(labels) + 1.2) + 0.6))  # fmt: skip
        for k, ax in enumerate(axes.flat):
            if k < len(series):
                _bars(ax, labels, [series[k]], "", f"C{k}")
                ax.set_title(series[k].name, fontsize=9)
            else:
                ax.set_visible(False)
        fig.supxlabel(xlabel, fontsize=9)
    fig.suptitle(title)
    return fig


def _bars(ax, labels: list[str], series: list[Series], xlabel: str, colour: str | None = None) -> None:
    """One bar per series in each label's row; each bar says its count at its end (after its error bar), in its
    colour: a zero has no bar, and its count still shows."""
    height = 0.8 / max(1, len(series))
    for k, s in enumerate(series):
        ys = [i + (k - (len(series) - 1) / 2) * height for i in range(len(labels))]
        bars = ax.barh(ys, s.values, height, xerr=s.errors, capsize=2 if s.errors else 0, label=s.name, color=colour,
                       error_kw={"elinewidth": 0.8, "alpha": 0.6})  # fmt: skip
        shade = bars.patches[0].get_facecolor() if bars.patches else "black"
        ends = [v + above for v, above in zip(s.values, s.errors[1], strict=True)] if s.errors else s.values
        for y, end, note in zip(ys, ends, s.notes, strict=True):
            ax.text(end, y, f" {note}", va="center", size=7, color=shade)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(0, 1.15)  # room for the count after a full bar
    ax.set_xticks([0, 0.5, 1], ["0", "50 %", "100 %"])
    ax.grid(axis="x", linewidth=0.4, alpha=0.5)
    ax.set_xlabel(xlabel, fontsize=8)


def _save(figures: dict, out: Path) -> list[Path]:
    plt = _pyplot()
    paths = []
    for name, fig in figures.items():
        fig.tight_layout()
        fig.savefig(out / name, dpi=DPI)
        plt.close(fig)
        paths.append(out / name)
    return paths
