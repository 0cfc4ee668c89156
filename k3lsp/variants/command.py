"""``k3lsp variants``: the variants of one finding across its workspace, from a report's finding or a file and line.

``--from REPORT --finding N`` starts from finding N (1-based) of a ``k3lsp audit`` JSON or SARIF report, searched
in the report's root; ``FILE:LINE`` from that line, in ``--root`` (default the current directory). The model
writes the rule (``--rule FILE``: this one instead, e.g. a saved one edited), spatch searches, the model triages
each candidate (``k3lsp.variants.hunt``). It prints the rule's path, the candidates with their verdicts and the
counts; ``--json`` the same as one object, each confirmed variant's finding with ``variant_of``, the original's
fingerprint. Exit status: 0 no variant confirmed, 1 variants confirmed, 2 errors (no rule, no daemon).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TextIO

from k3lsp.cli import batch, terminal
from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.variants import hunt as hunting
from k3lsp.variants import origin as origins
from k3lsp.variants.spatch import Bounds
from k3lsp.wire import sanitize, supplied
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import MAX_RULE_TRIES

MAX_RETRIES = MAX_RULE_TRIES - 1  # a rule request carries every earlier try
MAX_RULE_FILE_BYTES = 64 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's own flags (the daemon's, keys and effort are added by ``k3lsp.cli.main``)."""
    parser.add_argument("place", nargs="?", metavar="FILE:LINE", help="the line of the bug, if not from a report")
    parser.add_argument("--from", dest="report", type=Path, help="a k3lsp audit report (JSON or SARIF)")
    parser.add_argument("--finding", type=int, default=1, help="which finding of the report, from 1")
    parser.add_argument("--root", type=Path, default=Path("."), help="the workspace of FILE:LINE")
    parser.add_argument("--title", default="", help="what is wrong at FILE:LINE, for the model")
    parser.add_argument("--rule", type=Path, help="run this Coccinelle rule instead of asking the model for one")
    parser.add_argument("--retries", type=int, default=hunting.DEFAULT_RETRIES, help="rules after the first")
    parser.add_argument("--max-files", type=int, default=Bounds.files, help="C files searched")
    parser.add_argument("--max-seconds", type=float, default=Bounds.seconds, help="seconds spatch may take over them")
    parser.add_argument("--max-matches", type=int, default=Bounds.matches, help="matched lines kept")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("-o", "--output", type=Path, default=None, help="write the report here (default: stdout)")


def _problems(args: argparse.Namespace) -> list[str]:
    """Each wrong flag, in one sentence."""
    out = []
    if (args.report is None) == (args.place is None):
        out.append("give either FILE:LINE or --from REPORT (with --finding N)")
    if not 0 <= args.retries <= MAX_RETRIES:
        out.append(
            f"--retries {args.retries} is not 0 to {MAX_RETRIES} (a rule request carries {MAX_RULE_TRIES} tries)"
        )
    for flag, value in (("--max-files", args.max_files), ("--max-matches", args.max_matches)):
        if value < 1:
            out.append(f"{flag} {value} is too small: give 1 or more")
    if not args.max_seconds > 0:
        out.append(f"--max-seconds {args.max_seconds} is not a number of seconds above 0")
    return out


def _start(args: argparse.Namespace) -> tuple[origins.Origin, str | None]:
    """The finding to start from and the rule given with --rule; raises OriginError or OSError saying which."""
    if args.report is not None:
        start = origins.from_report(args.report, args.finding)
    else:
        start = origins.from_place(args.place, args.root, args.title)
    return start, None if args.rule is None else _read_rule(args.rule)


def run(args: argparse.Namespace, options: Options, endpoints: list[str], jobs: int) -> int:
    problems, start, rule = _problems(args), None, None
    try:
        if not problems:
            start, rule = _start(args)
    except (origins.OriginError, OSError) as exc:
        problems.append(str(exc))
    if problems or start is None:
        print(sanitize.line("k3lsp variants: error: " + "; ".join(problems)), file=sys.stderr)
        return batch.EXIT_ERROR
    first, *others = endpoints
    options = replace(options, endpoint=first, other_endpoints=tuple(others))
    settings = hunting.Settings(args.retries, Bounds(args.max_files, args.max_seconds, args.max_matches))

    def say(step: str) -> None:
        print(sanitize.line(f"k3lsp variants: {step}"), file=sys.stderr)

    async def searched() -> hunting.Hunt:
        pool = Pool(options, ResultCache(), client_name="k3lsp-variants", slots=jobs)
        try:
            return await hunting.hunt(pool, start, settings, say, rule=rule)
        finally:
            await pool.close()

    found = asyncio.run(searched())
    for error in found.errors:
        print(sanitize.line(f"k3lsp variants: error: {error}"), file=sys.stderr)
    formats = {"json": terminal.json_to(lambda: to_json(found)), "text": lambda out: print_text(found, out)}
    if not terminal.write_report(args.output, formats, "json" if args.json else "text", "variants"):
        return batch.EXIT_ERROR
    if found.errors:
        return batch.EXIT_ERROR
    return batch.EXIT_FINDINGS if found.count("confirmed") else batch.EXIT_CLEAN


def _read_rule(path: Path) -> str:
    try:
        return supplied.read(path, MAX_RULE_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OSError(f"--rule {path}: not UTF-8 text") from exc
    except OSError as exc:
        raise OSError(f"--rule {path}: {exc.strerror or exc}") from exc


def _scanned(found: hunting.Hunt) -> str:
    scan = found.scan
    if scan is None:
        return "spatch: not run"
    line = f"spatch: {len(scan.matches)} matched lines in {scan.searched:,} of {scan.total:,} C files"
    return line + (f"; stopped at {scan.stopped}" if scan.stopped else "")


def print_text(found: hunting.Hunt, out: TextIO) -> None:
    o = found.origin
    print(sanitize.line(f"variants of {o.rel}:{o.line}: {o.title} (CWE-{o.cwe})"), file=out)
    for n, tried in enumerate(found.tries, 1):
        print(sanitize.line(f"rule {n} refused: {tried['outcome']}"), file=out)
    if found.rule is not None:
        tries, where = len(found.tries) + 1, found.rule_path or "not saved"
        print(sanitize.line(f"rule: {where} (after {tries} {'try' if tries == 1 else 'tries'})"), file=out)
        print(sanitize.line(_scanned(found)), file=out)
    for c in found.candidates:
        why = f": {c.reason}" if c.reason else ""
        print(sanitize.line(f"{c.rel}:{c.line}: {c.unit.name}: {c.verdict}{why}"), file=out)
    print("k3lsp variants: " + ", ".join(f"{v} {k}" for k, v in found.counts().items()), file=out)


def to_json(found: hunting.Hunt) -> dict:
    o = found.origin
    scan = found.scan
    rows = [asdict(r) | {"variant_of": o.fingerprint} for c in found.candidates for r in c.rows]
    return {
        "origin": {"path": o.rel, "line": o.line, "end_line": o.end_line, "cwe": o.cwe, "title": o.title,
                   "fingerprint": o.fingerprint},
        "rule": None if found.rule_path is None else str(found.rule_path),
        "rule_text": found.rule,
        "tries": found.tries,
        "spatch": None if scan is None else scan.summary(),
        "candidates": [{"path": c.rel, "line": c.line, "unit": c.unit.name, "verdict": c.verdict,
                        "reason": c.reason} for c in found.candidates],
        "findings": [r for r in rows if r["verdict"] != "refuted"],
        "refuted": [r for r in rows if r["verdict"] == "refuted"],
        "errors": found.errors,
        "stats": found.counts(),
    }  # fmt: skip
