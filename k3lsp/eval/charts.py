"""The report's PNG charts, drawn from its JSON with matplotlib (the ``eval`` extra: ``uv sync --extra eval``).

CASTLE: the score of each configuration beside the paper's rows (analyzers and LLMs coloured apart, as the paper
colours them), and the recall per CWE. Fixes: the catch rate per subsystem with its 95 % Wilson interval.
Without matplotlib the report is written all the same and says how to get the charts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

INSTALL_HINT = "charts need matplotlib: uv sync --extra eval (or pip install 'k3lsp[eval]')"
COLOURS = {"analyzer": "#648fff", "llm": "#ffcc00", "ours": "#dc267f"}  # the paper's palette, ours apart


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt


def castle(report: dict, out: Path) -> list[Path]:
    plt = _pyplot()
    bars = [(f"k3lsp: {c['name']}", c["score"]["score"], "ours") for c in report["configurations"]]
    bars += [(p["name"], p["score"], p["kind"]) for p in report["paper"]]
    bars.sort(key=lambda b: b[1])
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(bars) + 1.2))
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[COLOURS[b[2]] for b in bars])
    for i, (_, value, _) in enumerate(bars):
        ax.text(value, i, f" {value}", va="center", size=8)
    ax.axvline(report["perfect"]["score"], color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"CASTLE score (perfect: {report['perfect']['score']})")
    title = "CASTLE: k3lsp beside the paper's rows"
    ax.set_title(title + (" (random weights: noise)" if report.get("random_weights") else ""))
    score = out / "castle-score.png"
    _save(plt, fig, score)

    configs = report["configurations"]
    cwes = [row["cwe"] for row in configs[0]["by_cwe"]] if configs else []
    series = []
    for c in configs:
        recall = {row["cwe"]: row["recall"] for row in c["by_cwe"]}
        series.append((c["name"], [recall[w] for w in cwes], None))
    fig = _grouped(plt, [f"CWE-{w}" for w in cwes], series, "recall (TP / vulnerable)")
    recall_png = out / "castle-cwe-recall.png"
    _save(plt, fig, recall_png)
    return [score, recall_png]


def fixes(report: dict, out: Path) -> list[Path]:
    configs = report["configurations"]
    if not configs:  # --cases-only: nothing was reviewed
        return []
    plt = _pyplot()
    dirs = list(dict.fromkeys(d for c in configs for d in c["directories"]))
    series = []
    for c in configs:
        rates = [c["directories"].get(d) for d in dirs]
        values = [r["rate"] if r else 0.0 for r in rates]
        lo = [v - r["wilson95"][0] if r else 0.0 for v, r in zip(values, rates, strict=True)]
        hi = [r["wilson95"][1] - v if r else 0.0 for v, r in zip(values, rates, strict=True)]
        series.append((c["name"], values, [lo, hi]))
    fig = _grouped(plt, dirs, series, "catch rate (95 % Wilson)")
    path = out / "fixes-subsystems.png"
    _save(plt, fig, path)
    return [path]


def _grouped(plt, labels: list[str], series: list[tuple[str, list[float], list | None]], ylabel: str):
    """Bars of 0..1 values, one group per label and one bar per series (name, values, error bars or None)."""
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(labels) * max(1, len(series))), 3.5))
    width = 0.8 / max(1, len(series))
    for k, (name, values, errors) in enumerate(series):
        xs = [i + k * width for i in range(len(labels))]
        ax.bar(xs, values, width, yerr=errors, capsize=3 if errors else 0, label=name)
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))], labels)
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel(ylabel)
    if series:
        ax.legend(fontsize=7)
    return fig


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
