"""`k3lsp eval castle DATASET` and `k3lsp eval fixes --repo PATH [RANGE | --list FILE]`: the flags of their own
(``k3lsp.cli.main`` adds the endpoint, key and effort flags every batch command shares), the run, the reports.

Both write ``report.json``, ``report.md`` and the PNG charts into ``--out`` and print the Markdown (or, with
``--json``, the JSON). Exit status 0 when every unit was audited, 2 otherwise (a unit failed or was left, the
input was bad): the report is still written for what was done, except when nothing was. SIGINT or SIGTERM ends
the run early with 130 or 143: what finished is in the run cache, and ``--resume`` goes on from it.
This module imports only argparse at the top, so building the command line costs nothing.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

EXIT_OK, EXIT_ERROR = 0, 2
MAX_LIST_BYTES = 16 * 1024 * 1024  # --list: ~400,000 commit ids
SEVERITY_DEFAULT = "medium"


def add_arguments(castle: argparse.ArgumentParser, fixes: argparse.ArgumentParser) -> None:
    from k3lsp.eval.catching import DEFAULT_DEPTH, DEFAULT_WINDOW
    from k3lsp.eval.matrix import AXES
    from k3lsp.wire.protocol import SEVERITIES

    castle.add_argument("dataset", type=Path, help="CASTLE-C250.json (or any dataset in its format)")
    castle.add_argument(
        "--witnesses-only",
        nargs="?",
        const="",
        default=None,
        metavar="TOOL,TOOL",
        help="score the analyzers alone, each and their union, asking no daemon (default: every one installed)",
    )
    fixes.add_argument("--repo", type=Path, required=True, help="the git repository whose history is measured")
    fixes.add_argument("revisions", nargs="*", metavar="RANGE", help="where to look for fixes (git log; default HEAD)")
    fixes.add_argument("--list", type=Path, help="a file of fix commit ids, one a line (# comments), instead of RANGE")
    fixes.add_argument("-n", type=int, default=None, help="review a sample of this many cases (default: all)")
    fixes.add_argument("--seed", type=int, default=0, help="the sample's seed: the same seed, the same cases")
    fixes.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="lines a finding may be off a bug line")
    fixes.add_argument("--min-severity", choices=SEVERITIES, default=SEVERITY_DEFAULT, help="findings that count")
    fixes.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help="directories that make a subsystem")
    fixes.add_argument("--cases-only", action="store_true", help="select the cases and their bug lines, review nothing")
    for p in (castle, fixes):
        p.add_argument(
            "--matrix",
            action="append",
            default=[],
            metavar="AXIS=V1,V2",
            help=f"run each configuration on the same units (axes: {', '.join(AXES)}); repeatable: their product",
        )
        p.add_argument("--out", type=Path, default=None, help="report directory (default: k3lsp-eval/<mode>)")
        p.add_argument("--resume", action="store_true", help="take units finished by an earlier run into --out")
        p.add_argument("--jobs", type=int, default=None, help="units in flight per daemon (default 4)")
        p.add_argument("--json", action="store_true", help="print the JSON report instead of the Markdown")


def run(args: argparse.Namespace, options, errors: list[str]) -> int:
    """Dispatch with the parsed shared settings; every failure is a clear message and exit status 2."""
    prog = f"k3lsp eval {args.eval_command}"
    try:
        if errors:
            raise _Refused("; ".join(errors))
        return (_castle if args.eval_command == "castle" else _fixes)(args, options)
    except _Stopped as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.status
    except _Refused as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
    except BrokenPipeError:
        raise  # a closed stdout ends the command quietly (k3lsp.wire.ending)
    except Exception as exc:
        from k3lsp.wire import sanitize

        print(sanitize.line(f"{prog}: error: {type(exc).__name__}: {exc}"), file=sys.stderr)
    return EXIT_ERROR


class _Refused(Exception):
    """Bad input, said in the message."""


class _Stopped(Exception):
    """A signal ended the run early (the message says what was kept); ``status`` is 128 + the signal."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _plan(args: argparse.Namespace, on_progress):
    from k3lsp.core.pool import DEFAULT_SLOTS
    from k3lsp.eval.running import Plan

    jobs = DEFAULT_SLOTS if args.jobs is None else args.jobs
    if jobs < 1:
        raise _Refused(f"--jobs must be at least 1, not {jobs}")
    out = args.out or Path("k3lsp-eval") / args.eval_command
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise _Refused(
            f"--out {out}: it is a file, not a directory; give a directory for the report (it is made when missing)"
        ) from None
    except OSError as exc:
        raise _Refused(f"--out {out}: cannot make the report's directory: {exc.strerror or exc}") from None
    return Plan(out=out, resume=args.resume, jobs=jobs, on_progress=on_progress)


def _configurations(args: argparse.Namespace, options):
    from k3lsp.eval import matrix

    try:
        return matrix.configurations(options, args.matrix)
    except matrix.MatrixError as exc:
        raise _Refused(str(exc)) from exc


def _measured(args: argparse.Namespace, work) -> object:
    """Run ``work(plan)`` under a progress bar, SIGINT/SIGTERM ending it early (what finished stays cached)."""
    import asyncio

    from k3lsp.cli import terminal
    from k3lsp.core import tasks
    from k3lsp.wire import ending

    stop = ending.Stop()

    async def main(on_progress):
        plan = _plan(args, on_progress)
        with stop.catching():
            return plan, await tasks.until_stopped(work(plan), stop.event)

    with terminal.progress_bar(sys.stderr.isatty(), "evaluating") as on_progress:
        try:
            return asyncio.run(main(on_progress))
        except tasks.Interrupted:
            raise _Stopped(
                f"interrupted by {stop.name}: the units that finished are in the run cache; run it again with "
                "--resume to go on",
                stop.exit_status(EXIT_ERROR),
            ) from None


def _plan_json(plan) -> dict:
    return {"out": str(plan.out), "resume": plan.resume, "jobs": plan.jobs}


def _publish(args: argparse.Namespace, out: Path, report: dict, markdown: str, draw) -> int:
    """Write report.json, report.md and the charts into ``out``; print one of them; the exit status."""
    import json

    from k3lsp.eval import charts

    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    notes = []
    if charts.available():
        drawn = draw(report, out)
        notes.append("charts: " + ", ".join(p.name for p in drawn) if drawn else "no charts: nothing was judged")
    else:
        notes.append(charts.INSTALL_HINT)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if args.json else markdown)
    print(f"{' '.join(notes)}; report.json and report.md in {out}", file=sys.stderr)
    errors = [e for c in report["configurations"] for e in c["errors"]]
    for error in errors:
        print(f"k3lsp eval: error: {error}", file=sys.stderr)
    return EXIT_ERROR if errors else EXIT_OK


def _castle(args: argparse.Namespace, options) -> int:
    import time

    from k3lsp.eval import castle, castle_run, castle_witnesses, charts, report

    started = time.time()
    try:
        dataset = castle.load(args.dataset)
    except castle.DatasetError as exc:
        raise _Refused(str(exc)) from exc
    if args.witnesses_only is not None:
        if args.matrix:
            raise _Refused("--witnesses-only asks no daemon: it has no --matrix")
        names = [n for n in args.witnesses_only.split(",") if n]
        work = functools.partial(castle_run.alone, dataset, options, names)
    else:
        work = functools.partial(castle_run.run, dataset, _configurations(args, options))
    try:
        plan, outcomes = _measured(args, work)
    except castle_witnesses.WitnessError as exc:
        raise _Refused(str(exc)) from exc
    alone = "--witnesses-only: the analyzers alone" if args.witnesses_only is not None else None
    head = report.meta(["k3lsp", *args.argv], _plan_json(plan), started, alone)
    result = report.castle_json(dataset, outcomes, head)
    return _publish(args, plan.out, result, report.castle_markdown(result), charts.castle)


def _fixes(args: argparse.Namespace, options) -> int:
    import time

    from k3lsp.eval import bugs, charts, fixes_run, git, history, report, review
    from k3lsp.eval.fixes_run import Judging

    started = time.time()
    if args.list is not None and args.revisions:
        raise _Refused("give RANGE or --list, not both")
    if args.n is not None and args.n < 1:
        raise _Refused(f"-n must be at least 1, not {args.n}")
    if args.window < 0 or args.depth < 1:
        raise _Refused("--window must be 0 or more and --depth at least 1")
    configurations = _configurations(args, options)
    judging = Judging(args.window, args.min_severity, args.depth)
    try:
        if args.list is not None:
            listed = _listed(args.list)
            selection = history.candidates(args.repo, listed, listed=True)
        else:
            selection = history.candidates(args.repo, args.revisions or ["HEAD"])
        selection = history.sample(args.repo, selection, args.n, args.seed, options.wants)
    except git.GitError as exc:
        raise _Refused(str(exc)) from exc
    located, unlocated = [], []
    for case in selection.cases:
        try:
            found = bugs.locate(args.repo, case, options.wants)
        except git.GitError as exc:  # this case alone: the others are still measured
            found = str(exc)
        if isinstance(found, str):
            unlocated.append({"fix": case.fix, "introducing": case.introducing, "why": found})
        else:
            located.append(found)
    if args.cases_only:
        plan, outcomes = _plan(args, None), []
    else:
        plan, outcomes = _measured(
            args, lambda plan: fixes_run.run(args.repo, located, review.reviewer(), configurations, plan, judging)
        )
    cases_only = "--cases-only: nothing was reviewed" if args.cases_only else None
    head = report.meta(["k3lsp", *args.argv], _plan_json(plan), started, cases_only)
    revs = [str(args.list)] if args.list is not None else args.revisions
    result = report.fixes_json(str(args.repo), revs, selection, located, unlocated, outcomes, judging, head)
    return _publish(args, plan.out, result, report.fixes_markdown(result), charts.fixes)


def _listed(path: Path) -> list[str]:
    """The commit ids of ``--list``, read as a file a flag names (``k3lsp.wire.supplied``: it may be /dev/zero)."""
    from k3lsp.wire import supplied

    try:
        text = supplied.read(path, MAX_LIST_BYTES).decode("utf-8")
    except OSError as exc:
        raise _Refused(f"cannot read --list {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise _Refused(f"cannot read --list {path}: it is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]
