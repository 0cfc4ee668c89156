"""The eval's reports: JSON for machines (everything needed to reproduce the run and recheck its numbers), and
Markdown for people, rendered from that JSON alone (so the two never disagree).

The JSON records the test ids or commit ids in order, every configuration's settings, the daemon's welcome
(model, fingerprint, experts, ranks, prompt version, budgets), the dataset's digest and, per test or commit,
what was found and how it was judged. The Markdown shows the CASTLE table as the paper prints it with the
paper's rows beside ours, per-CWE TP and FN, the cost per audited unit, and one comparison table with a row per
configuration; for ``fixes``, the catch rate with its 95 % Wilson interval, noise and the rate per subsystem. A
checkpoint with random weights is named in the first lines: its score is noise.

Text from the daemon or from the repository (a model name, a path) goes into Markdown as a code span, through
``sanitize.line`` like all such text on its way to a person.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from k3lsp import __version__
from k3lsp.core.replies import Welcome
from k3lsp.eval import castle_score, catching
from k3lsp.eval.bugs import Bug
from k3lsp.eval.castle import PAPER_ROWS, Dataset
from k3lsp.eval.castle_run import CastleOutcome
from k3lsp.eval.castle_score import Score
from k3lsp.eval.catching import Rate
from k3lsp.eval.fixes_run import FixesOutcome, Judging
from k3lsp.eval.history import Selection
from k3lsp.eval.running import Audited
from k3lsp.wire import sanitize

RANDOM_WEIGHTS = (
    "**Random weights.** The checkpoint served ({model}) says its weights are random: its findings, and so its "
    "score, are noise. This run shows that the harness works end to end, not how good any model is."
)


def meta(command: Sequence[str], plan: dict, started: float | None = None, no_daemon: str | None = None) -> dict:
    """What every report starts with: when it started (``started``, seconds since the epoch; None: now) and
    finished (now, as the report is made), which k3lsp, the command line, how it ran, and why no daemon was
    asked when none was (``no_daemon``: the flag and what ran instead)."""
    finished = time.time()
    return {
        "k3lsp": __version__,
        "started": _when(finished if started is None else started),
        "finished": _when(finished),
        "command": list(command),
        "plan": plan,
        **({"no_daemon": no_daemon} if no_daemon else {}),
    }


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def daemon_json(welcome: Welcome | None) -> dict | None:
    if welcome is None:
        return None
    raw = sanitize.data(welcome.raw)
    keep = ("model", "fingerprint", "experts", "ranks", "server", "limits")
    return {k: raw[k] for k in keep if k in raw} | {"random_weights": welcome.random_weights}


def score_json(s: Score) -> dict:
    return asdict(s) | {"score": s.score, "precision": s.precision, "recall": s.recall, "accuracy": s.accuracy}


def _summary(audited: Audited) -> dict:
    s = audited.summary
    return {
        "units": s.units,
        "audited": s.audited,
        "resumed": s.cached,
        "incomplete": len(s.incomplete),
        "refused": len(s.refused),
        "failed": [f"{f.target.path}: {f.target.unit.name}: {f.code}: {f.message}" for f in s.failed],
        "left": len(s.left),
        "unavailable": s.unavailable,
        "dropped": s.dropped,
    }


def _errors(summary: dict) -> list[str]:
    """What keeps a run from having audited every unit (exit status 2)."""
    out = list(summary["failed"])
    if summary["refused"]:
        out.append(
            f"{summary['refused']} units too long to audit (the daemon refused them): their findings are missing"
        )
    if summary["left"]:
        out.append(f"{summary['left']} of {summary['units']} units not audited: {summary['unavailable']}")
    return out


# --- CASTLE ----------------------------------------------------------------------------------------------------


def castle_json(dataset: Dataset, outcomes: Sequence[CastleOutcome], head: dict) -> dict:
    programs = {p.test_id: p.name for p in dataset.programs()}
    configurations = []
    for o in outcomes:
        summary = _summary(o.audited)
        configurations.append(
            {
                "name": o.configuration.name,
                "settings": o.configuration.settings,
                "thinking_effort": o.configuration.options.effort("background"),
                "daemon": daemon_json(o.audited.welcome),
                "score": score_json(o.score),
                "by_cwe": [asdict(row) | {"recall": row.recall} for row in castle_score.by_cwe(o.tests)],
                "cost": o.cost.to_json(),
                "seconds": o.audited.seconds,
                "summary": summary,
                "errors": _errors(summary) + o.problems,
                "analyzers": o.analyzers,
                "tests": [
                    {
                        "id": r.test.id,
                        "program": programs[r.test.id],
                        "vulnerable": r.test.vulnerable,
                        "cwe": r.test.cwe,
                        "lines": list(r.test.lines),
                        "tp": r.tp,
                        "tn": r.tn,
                        "fp": r.fp,
                        "fn": r.fn,
                        "findings": [asdict(f) | {"matched": m} for f, m in zip(r.kept, r.matched, strict=True)],
                        "cost": o.costs[r.test.id].to_json() if r.test.id in o.costs else None,
                    }
                    for r in o.tests
                ],
            }
        )
    return head | {
        "kind": "castle",
        "dataset": {
            "path": dataset.path,
            "sha256": dataset.digest,
            "name": dataset.name,
            "version": dataset.version,
            "tests": len(dataset.tests),
            "vulnerable": dataset.vulnerable,
            "ids": [t.id for t in dataset.tests],
        },
        "perfect": score_json(castle_score.perfect(dataset)),
        "no_findings": score_json(castle_score.score(dataset, {})[0]),
        "random_weights": any((c["daemon"] or {}).get("random_weights") for c in configurations),
        "configurations": configurations,
        "paper": [asdict(r) for r in PAPER_ROWS],
    }


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _md(value: object) -> str:
    """Text from the daemon or the repository as a Markdown code span: one line (``sanitize.line``), shown as it is
    (nothing inside a code span is a link, emphasis or HTML), its backticks and table bars kept from ending it."""
    return "`" + sanitize.line(value).replace("`", "'").replace("|", "\\|") + "`"


def _header(title: str, report: dict) -> list[str]:
    first = next((c["daemon"] for c in report["configurations"] if c["daemon"]), None)
    out = [f"# {title}", ""]
    if report.get("random_weights"):
        out += ["> " + RANDOM_WEIGHTS.format(model=_md((first or {}).get("model", "?"))), ""]
    if first:
        limits = first.get("limits") or {}
        out.append(
            f"- daemon: {_md(first.get('model'))} ({first.get('experts')} experts, {_ranks(first.get('ranks'))}), "
            f"fingerprint {_md(str(first.get('fingerprint', '-'))[:16])}, prompt version "
            f"{_md(limits.get('prompt_version', '-'))}; generated tokens per unit at each effort: "
            f"{_md(limits.get('effort_tokens', '-'))}"
        )
    elif report.get("no_daemon"):
        out.append(f"- daemon: none asked ({report['no_daemon']})")
    else:
        out.append("- daemon: none answered")
    out.append(
        f"- k3lsp {report['k3lsp']}, started {report['started']}, finished {report.get('finished', '-')}: "
        f"{_md(' '.join(report['command']))}"
    )
    return out


def _ranks(n: object) -> str:
    return "1 rank" if n == 1 else f"{n} ranks"


def _cost_cells(c: dict) -> list[str]:
    per = c["cost"]["per_unit"]
    return [
        str(c["cost"]["units"]),
        f"{per['prefilled_tokens']:.0f}",
        f"{per['generated_tokens']:.0f}",
        f"{per['seconds']:.2f}",
        f"{per['tool_calls']:.2f}",
        str(c["cost"]["incomplete"]),
        f"{c['seconds']:.0f} s",
    ]


COST_HEADER = ("units", "prefilled/unit", "generated/unit", "s/unit", "tool calls/unit", "cut short", "wall time")


def castle_markdown(report: dict) -> str:
    d = report["dataset"]
    out = _header("CASTLE-C250 with k3lsp", report)
    out.append(
        f"- dataset: {_md(d['name'])} {_md(d['version'])}, {d['tests']} tests ({d['vulnerable']} vulnerable), "
        f"sha256 {d['sha256'][:16]}"
    )
    out.append(
        f"- scoring: the authors' rules (docs/eval.md): a perfect run scores {report['perfect']['score']}, "
        f"one with no findings {report['no_findings']['score']}"
    )
    out += ["", "## The CASTLE table", ""]
    rows = [(f"**k3lsp: {c['name']}**", _version(c), c["score"]) for c in report["configurations"]] + [
        (p["name"], p["version"], _paper_score(p)) for p in report["paper"]
    ]
    rows.sort(key=lambda r: -r[2]["score"])
    out += _table(
        ("Name", "Version", "TP", "TN", "FP", "FN", "P", "R", "A", "CASTLE Score"),
        [
            (name, version, s["tp"], s["tn"], s["fp"], s["fn"], _pct(s["precision"]), _pct(s["recall"]),
             _pct(s["accuracy"]), s["score"])
            for name, version, s in rows
        ],
    )  # fmt: skip
    out += ["", "## Configurations", ""]
    out += _table(
        ("configuration", "score", "TP", "TN", "FP", "FN", "bonus", *COST_HEADER),
        [
            (c["name"], c["score"]["score"], c["score"]["tp"], c["score"]["tn"], c["score"]["fp"],
             c["score"]["fn"], c["score"]["bonus"], *_cost_cells(c))
            for c in report["configurations"]
        ],
    )  # fmt: skip
    out += ["", "## Per CWE: found (TP) and missed (FN) of the vulnerable tests", ""]
    configs = report["configurations"]
    cwes = [row["cwe"] for row in configs[0]["by_cwe"]] if configs else []
    cells = {(c["name"], row["cwe"]): row for c in configs for row in c["by_cwe"]}
    out += _table(
        ("CWE", "vulnerable", *(f"TP / FN ({c['name']})" for c in configs)),
        [
            (cwe, cells[(configs[0]["name"], cwe)]["vulnerable"],
             *(f"{cells[(c['name'], cwe)]['tp']} / {cells[(c['name'], cwe)]['fn']}" for c in configs))
            for cwe in cwes
        ],
    )  # fmt: skip
    out += _problems(report)
    return "\n".join(out) + "\n"


def _version(configuration: dict) -> str:
    """What ran, for the table's Version column: the analyzers' own versions when no daemon did."""
    if configuration["daemon"] is None and configuration["analyzers"]:
        return _md("; ".join(configuration["analyzers"].values()))
    return "this run"


def _paper_score(p: dict) -> dict:
    s = Score(p["tp"], p["tn"], p["fp"], p["fn"], bonus=0)
    return score_json(s) | {"score": p["score"]}


def _problems(report: dict) -> list[str]:
    out = []
    for c in report["configurations"]:
        summary = c.get("summary") or {}  # a fixes configuration has none: its reviews say what went wrong
        notes = (
            [f"{summary['incomplete']} units cut short (findings may be missing)"] if summary.get("incomplete") else []
        )
        notes += [f"{summary['resumed']} units taken from the run cache (--resume)"] if summary.get("resumed") else []
        notes += c["errors"] + summary.get("dropped", [])
        if notes:
            out += ["", f"## Notes: {c['name']}", ""] + [f"- {_md(n)}" for n in notes]
    return out


# --- fixes -----------------------------------------------------------------------------------------------------


def _rate_json(r: Rate) -> dict:
    lo, hi = r.interval
    return {"caught": r.caught, "judged": r.judged, "rate": r.value, "wilson95": [lo, hi]}


def fixes_json(
    repo: str,
    revs: Sequence[str],
    selection: Selection,
    bugs: Sequence[Bug],
    unlocated: Sequence[dict],
    outcomes: Sequence[FixesOutcome],
    judging: Judging,
    head: dict,
) -> dict:
    """``bugs``: the selected cases with bug lines; ``unlocated``: the others, each with why it has none."""
    configurations = []
    for o in outcomes:
        t = o.tally
        configurations.append(
            {
                "name": o.configuration.name,
                "settings": o.configuration.settings,
                "thinking_effort": o.configuration.options.effort("background"),
                "daemon": daemon_json(o.welcome),
                "catch": _rate_json(t.rate),
                "incomplete": t.incomplete,
                "findings": t.findings,
                "away": t.away,
                "findings_per_commit": t.findings_per_commit,
                "away_per_commit": t.away_per_commit,
                "directories": {d: _rate_json(r) for d, r in o.directories.items()},
                "cost": o.cost.to_json(),
                "seconds": o.seconds,
                "errors": [f"{j.bug.case.introducing[:12]}: {p}" for j in o.judged for p in j.review.problems],
                "cases": [
                    {
                        "fix": j.bug.case.fix,
                        "introducing": j.bug.case.introducing,
                        "directory": catching.directory(j.bug, judging.depth),
                        "caught": j.caught if j.whole else None,
                        "findings": [asdict(f) for f in j.considered],
                        "catching": [asdict(f) for f in j.catching],
                        "problems": list(j.review.problems),
                    }
                    for j in o.judged
                ],
            }
        )
    return head | {
        "kind": "fixes",
        "repository": repo,
        "revisions": list(revs),
        "judging": asdict(judging),
        "selection": {"considered": selection.considered, "skipped": dict(selection.skipped)},
        "cases": [
            {
                "fix": b.case.fix,
                "introducing": b.case.introducing,
                "subject": b.case.subject,
                "add_only": b.add_only,
                "bug_lines": [asdict(line) for line in b.lines],
            }
            for b in bugs
        ],
        "unlocated": list(unlocated),
        "random_weights": any((c["daemon"] or {}).get("random_weights") for c in configurations),
        "configurations": configurations,
    }


def fixes_markdown(report: dict) -> str:
    j, sel = report["judging"], report["selection"]
    out = _header("A project's Fixes: history with k3lsp", report)
    skipped = ", ".join(f"{n} {_md(why)}" for why, n in sorted(sel["skipped"].items())) or "none"
    out.append(
        f"- repository {_md(report['repository'])}, {_md(' '.join(report['revisions']) or 'HEAD')}: "
        f"{sel['considered']} commits looked at; passed over: {skipped}; "
        f"{len(report['cases'])} cases with bug lines, {len(report['unlocated'])} without"
    )
    out.append(
        f"- caught: an introduced finding of severity {j['min_severity']} or above within {j['window']} lines of a "
        f"bug line; subsystems {j['depth']} directories deep"
    )
    if report["configurations"]:
        out += ["", "## Configurations", ""]
        out += _table(
            ("configuration", "caught", "rate", "95 % (Wilson)", "findings/commit", "away from the bug/commit",
             "not whole", *COST_HEADER),
            [
                (c["name"], f"{c['catch']['caught']} / {c['catch']['judged']}", _pct(c["catch"]["rate"]),
                 f"{_pct(c['catch']['wilson95'][0])} - {_pct(c['catch']['wilson95'][1])}",
                 f"{c['findings_per_commit']:.2f}", f"{c['away_per_commit']:.2f}", c["incomplete"], *_cost_cells(c))
                for c in report["configurations"]
            ],
        )  # fmt: skip
    else:  # a table of no rows says nothing
        out += ["", "Nothing was reviewed: the cases below are what a run would review."]
    for c in report["configurations"]:
        out += ["", f"## Catch rate by subsystem: {c['name']}", ""]
        out += _table(
            ("directory", "caught", "rate", "95 % (Wilson)"),
            [
                (_md(d), f"{r['caught']} / {r['judged']}", _pct(r["rate"]),
                 f"{_pct(r['wilson95'][0])} - {_pct(r['wilson95'][1])}")
                for d, r in c["directories"].items()
            ],
        )  # fmt: skip
    out += _problems(report)
    out += ["", "## Cases", ""]
    out += _table(
        ("fix", "introducing", "bug lines", "add-only fix",
         *(f"caught ({c['name']})" for c in report["configurations"])),
        [
            (case["fix"][:12], case["introducing"][:12], len(case["bug_lines"]), "yes" if case["add_only"] else "",
             *(_caught(c, case) for c in report["configurations"]))
            for case in report["cases"]
        ],
    )  # fmt: skip
    return "\n".join(out) + "\n"


def _caught(configuration: dict, case: dict) -> str:
    judged = next(
        j for j in configuration["cases"] if (j["fix"], j["introducing"]) == (case["fix"], case["introducing"])
    )
    return {True: "caught", False: "missed", None: "not whole"}[judged["caught"]]
