"""The witnesses alone on CASTLE-C250, scored as the CASTLE authors score a tool, beside the paper's rows.

A stand-in until ``k3lsp eval castle --witnesses-only`` (issue 27) scores them through the eval harness's own
scorer: it will replace this script. Each test's code is analyzed by ``k3lsp.witnesses.analyze.analyze`` (the
library the editor uses, no compile database, files renamed so no name leaks a label), and the alerts scored
with the rules of issue 27: an alert matches when its line is one of the test's ``lines`` or its CWE is the
test's, a child of it or a direct parent; a vulnerable test with a match is one TP (further matches count
nothing), a test without alerts and not vulnerable a TN, every alert that does not match an FP, a vulnerable
test without a match an FN; score = 5·TP + 2·TN − FP + the Top-25 bonus (``5 − index // 5`` for each test whose
CWE is in the 2024 Top 25, once the running TP count is above 0, in dataset order). cppcheck's ``style`` and
``information`` alerts are already left out by the adapter, as the authors did.

Run: ``uv run python bench/castle_witnesses.py [PATH/TO/CASTLE-C250.json] [--tools cppcheck,clang,gcc]``
(default: the snapshot at /work/.mirror/CASTLE-Benchmark+CASTLE-Benchmark; ``--limit N`` for a quick run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from k3lsp.witnesses.analyze import analyze, find  # noqa: E402
from k3lsp.witnesses.child import Limits  # noqa: E402

MIRROR = Path("/work/.mirror/CASTLE-Benchmark+CASTLE-Benchmark/repo")
TOP25 = [79, 787, 89, 352, 22, 125, 78, 416, 862, 434, 94, 20, 77, 287, 269, 502, 200, 863, 918, 119, 476, 798,
         190, 400, 306]  # fmt: skip
PAPER = {"cppcheck": ("Cppcheck", 405), "clang": ("Clang Analyzer", 381), "gcc": ("GCC -fanalyzer", 523)}


def load(path: str | None) -> dict:
    if path:
        return json.loads(Path(path).read_text())
    shown = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "show", "HEAD:datasets/CASTLE-C250.json"],
        capture_output=True,
        check=True,
    )
    return json.loads(shown.stdout)


def family(data: dict, cwe: int) -> set[int]:
    entry = data["cwes"].get(str(cwe), {})
    related = [int(k) for side in ("children", "parents") for item in entry.get(side, []) for k in item]
    return {cwe, *related}


def score(data: dict, alerts: dict[str, list[tuple[int, int | None]]]) -> dict:
    """TP, TN, FP, FN and the score of one tool's (line, cwe) alerts per test id."""
    tp = tn = fp = fn = bonus = 0
    for test in data["tests"]:
        found = alerts.get(test["id"], [])
        if test["vulnerable"]:
            cwes = family(data, test["cwe"])
            matches = [a for a in found if a[0] in test["lines"] or a[1] in cwes]
            tp, fn, fp = tp + bool(matches), fn + (not matches), fp + len(found) - len(matches)
        else:
            tn, fp = tn + (not found), fp + len(found)
        if test["cwe"] in TOP25 and tp > 0:
            bonus += 5 - TOP25.index(test["cwe"]) // 5
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    accuracy = (tp + tn) / len(data["tests"])
    total = 5 * tp + 2 * tn - fp + bonus
    return {"TP": tp, "TN": tn, "FP": fp, "FN": fn, "precision": precision, "recall": recall, "accuracy": accuracy,
            "score": total}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", nargs="?")
    parser.add_argument("--tools", default="cppcheck,clang,gcc")
    parser.add_argument("--limit", type=int, default=0, help="only the first N tests (a quick run)")
    args = parser.parse_args()
    data = load(args.dataset)
    if args.limit:
        data["tests"] = data["tests"][: args.limit]
    tools = [t for t in args.tools.split(",") if find(t) is not None]
    per_tool: dict[str, dict[str, list]] = {t: {} for t in [*tools, "union"]}
    started = time.monotonic()
    scratch = Path(REPO / ".cache" / "castle")
    scratch.mkdir(parents=True, exist_ok=True)
    for n, test in enumerate(data["tests"]):
        path = scratch / f"test{n}.c"  # no label in the name (CASTLE names files CASTLE-<cwe>-<n>.c)
        report = analyze(path, test["code"], None, tools, limits=Limits(seconds=60))
        for alert in report.alerts:
            entry = (alert.line, alert.cwe)
            per_tool[alert.tool].setdefault(test["id"], []).append(entry)
            per_tool["union"].setdefault(test["id"], []).append(entry)
    seconds = time.monotonic() - started
    print(f"CASTLE-C250: {len(data['tests'])} tests, {seconds:.0f} s; versions: "
          + "; ".join(f"{t} = {found.version}" for t in tools if (found := find(t))))  # fmt: skip
    print("| tool | TP | TN | FP | FN | precision | recall | accuracy | score | paper |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tool, alerts in per_tool.items():
        s = score(data, alerts)
        paper = PAPER.get(tool)
        print(f"| {tool} | {s['TP']} | {s['TN']} | {s['FP']} | {s['FN']} | {s['precision']:.2f} | {s['recall']:.2f} "
              f"| {s['accuracy']:.2f} | {s['score']} | {f'{paper[0]} {paper[1]}' if paper else ''} |")  # fmt: skip
        if paper and not args.limit:
            print(f"ratio castle_{tool}_vs_paper = {s['score'] / paper[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
