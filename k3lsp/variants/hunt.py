"""One variant search: the rule (the model's, checked, tried on the finding's own line, retried), spatch over the
workspace, and each match audited as a candidate with the original finding as context.

The rule must first match the finding it was written for: spatch runs it on the finding's own file, and a rule
refused by the checks (``k3lsp.variants.rule``), one spatch cannot parse, or one that misses the finding's lines
goes back to the model with what was wrong (the request's ``tries``), at most ``retries`` times. The rule that
matches is saved beside the results (``.k3lsp/variants/<fingerprint>.cocci`` in the workspace) so the user can
rerun it (``k3lsp variants --rule``), edit it, or send it to the kernel's ``scripts/coccinelle/``.

Each unit with a match (other than the finding's own) becomes a candidate: an ordinary audit of that unit with
one analyzer alert on the matched line (tool ``variants``, the original finding's title and place as its
message), through the audit core like any witness's alert, so the model's ``triage_alert`` verdict comes back
folded into the unit's findings (``k3lsp.core.verdicts``): confirmed, refuted, or not triaged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.cli.admission import Source, read_sources
from k3lsp.cli.batch import row
from k3lsp.core import service
from k3lsp.core.client import DaemonError
from k3lsp.core.connection import DaemonUnavailable
from k3lsp.core.options import admitted_files
from k3lsp.core.pool import Pool
from k3lsp.core.reachability import Reachability
from k3lsp.findings import pipeline, suppress
from k3lsp.findings.report import Reported
from k3lsp.kbuild.config import ConfigError
from k3lsp.kbuild.state import Kind
from k3lsp.units.split import Unit
from k3lsp.variants import asking, spatch
from k3lsp.variants.origin import Origin
from k3lsp.variants.rule import RuleRefused, check, extract, refusal
from k3lsp.wire.protocol import MAX_RULE_CHARS, Priority
from k3lsp.witnesses.alert import Alert

TOOL = "variants"  # the alerts' tool: what marks a finding as a variant's verdict
RULES_DIR = Path(".k3lsp") / "variants"
VERDICTS = ("confirmed", "refuted", "untriaged", "failed")  # what a candidate came to (Candidate.verdict)
DEFAULT_RETRIES = 2  # rules after the first one, each told what was wrong with the last
OWN_FILE_SECONDS = 30.0  # a rule's try on the finding's own file: bounds of its own, not the workspace search's


@dataclass(frozen=True)
class Settings:
    retries: int = DEFAULT_RETRIES
    bounds: spatch.Bounds = field(default_factory=spatch.Bounds)


@dataclass
class Candidate:
    """A unit the rule matched: where, and what the model said of it (``confirmed``, ``refuted``, or
    ``untriaged`` when its audit gave no verdict on the alert; ``failed`` when it was not audited)."""

    rel: str
    unit: Unit
    line: int  # the first matched line in the unit, 1-based in the file
    verdict: str = "untriaged"
    reason: str = ""
    rows: list[Reported] = field(default_factory=list)  # the variant's findings, in file coordinates


@dataclass
class Hunt:
    origin: Origin
    rule: str | None = None
    rule_path: Path | None = None
    tries: list[dict[str, str]] = field(default_factory=list)  # the refused rules and why, oldest first
    scan: spatch.Scan | None = None
    candidates: list[Candidate] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(c.verdict == verdict for c in self.candidates)

    def counts(self) -> dict[str, int]:
        """The candidates, and how many of them each verdict has (the reports' counts)."""
        return {"candidates": len(self.candidates)} | {v: self.count(v) for v in VERDICTS}


Say = Callable[[str], None]


def _unit_at(units: tuple[Unit, ...] | list[Unit], line: int) -> Unit | None:
    """The unit holding 1-based file line ``line``."""
    return next((u for u in units if u.start_line < line <= u.end_line + 1), None)


def miss(origin: Origin, scan: spatch.Scan) -> str | None:
    """Why a rule's run on the finding's own file does not count as matching it; None when it matched a line of
    the finding."""
    lines = sorted({m.line for m in scan.matches})
    if any(origin.line <= n <= origin.end_line for n in lines):
        return None
    span = f"{origin.line}" if origin.end_line == origin.line else f"{origin.line}-{origin.end_line}"
    said = f"; spatch said: {scan.errors[0]}" if scan.errors else ""
    said += f"; spatch stopped at {scan.stopped}" if scan.stopped else ""
    found = f"it matched lines {', '.join(map(str, lines[:20]))} instead" if lines else "it matched nothing there"
    return f"the rule did not match line {span} of {origin.rel}, the finding's line: {found}{said}"


async def _tried(rule: str, origin: Origin, bounds: spatch.Bounds) -> str | None:
    """What is wrong with a checked rule: spatch cannot parse it, or it misses the finding; None: it is good."""
    why = await asyncio.to_thread(spatch.parse_error, rule, origin.root)
    if why is not None:
        return f"spatch cannot parse the rule: {why}"
    alone = spatch.Bounds(files=1, seconds=OWN_FILE_SECONDS, per_file=bounds.per_file)  # not the workspace bounds
    own = await asyncio.to_thread(spatch.search, rule, [origin.path], origin.root, alone)
    return miss(origin, own)


async def write_rule(pool: Pool, origin: Origin, unit: Unit, hunt: Hunt, settings: Settings, say: Say) -> None:
    """The model's rule into ``hunt.rule``, or ``hunt.errors`` saying why there is none."""
    target = service.Document(origin.path, origin.root, origin.rel).target(unit)
    for attempt in range(1, settings.retries + 2):
        say(f"asking the model for a rule (try {attempt} of {settings.retries + 1})")
        try:
            answer = await asking.ask(pool, target, origin.wire(unit), hunt.tries)
        except (DaemonUnavailable, DaemonError) as exc:
            hunt.errors.append(f"the model could not be asked for a rule: {exc}")
            return
        rule = answer  # what the model is shown of this try: the rule once it is out of its fence
        try:
            rule = extract(answer)
            check(rule)
        except RuleRefused as exc:
            hunt.tries.append(asking.tried(rule, f"refused before spatch ran it: {exc}"))
            continue
        why = await _tried(rule, origin, settings.bounds)
        if why is None:
            hunt.rule = rule
            return
        hunt.tries.append(asking.tried(rule, why))
    last = hunt.tries[-1]["outcome"] if hunt.tries else "no answer"
    hunt.errors.append(f"no rule after {settings.retries + 1} tries; the last: {last}")


async def take_rule(rule: str, origin: Origin, hunt: Hunt, settings: Settings) -> None:
    """A rule the user gave (``--rule``) into ``hunt.rule``, checked and tried as the model's are, or
    ``hunt.errors`` saying why not."""
    try:
        checked = check(rule)
    except RuleRefused as exc:
        hunt.errors.append(f"the rule is refused: {exc}")
        return
    why = await _tried(checked, origin, settings.bounds)
    if why is None:
        hunt.rule = checked
    else:
        hunt.errors.append(why)


def save_rule(origin: Origin, rule: str) -> Path:
    """The rule in the workspace's ``.k3lsp/variants/``, named after the finding, with where it came from when
    that can be said in a comment the checks take: the saved rule is given back with ``--rule``, checked again,
    and a file such as ``tools/perf/builtin-script.c`` (or a name holding a newline) would have it refused, as
    would a comment that takes a rule at the bound past it (that rule is saved alone).

    The folder and the file may be the repository's: a ``.k3lsp`` that links outside is refused (OSError), and
    the file is a new one renamed into place, so a link there (to ``~/.bashrc``) is replaced, never written
    through."""
    folder = origin.root / RULES_DIR
    if not folder.resolve().is_relative_to(origin.root.resolve()):
        raise OSError("it leads outside the workspace")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{origin.fingerprint[:32]}.cocci"
    head = f"// k3lsp variants of the finding {origin.fingerprint[:32]} at {origin.rel}:{origin.line}"
    if len(head.splitlines()) != 1 or refusal(head) is not None:
        head = f"// k3lsp variants of the finding {origin.fingerprint[:32]}, line {origin.line} of its file"
    text = f"{head}\n{rule}"
    fd, tmp = tempfile.mkstemp(prefix=".k3lsp-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text if len(text) <= MAX_RULE_CHARS else rule)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def workspace_files(pool: Pool, root: Path, reach: Reachability) -> tuple[list[Path], int]:
    """The workspace's C sources the settings admit (headers are searched where a source includes them: never,
    spatch runs with --no-includes), inside it (no link out), in a stable order; with ``unbuilt: hide``
    (``--only-built``) only those kbuild builds under the ``kconfig`` setting (issue 43: a variant in code the
    user's kernel never compiles is noise to them), and how many were left out. Raises ConfigError."""
    out = []
    for path in admitted_files(root, root, pool.options):
        if path.suffix == ".c" and os.path.realpath(path).startswith(f"{root}{os.sep}"):
            out.append(path)
    if not pool.options.only_built():
        return out, 0
    reading = reach.reach(root, pool.options.kconfig).reading
    built = [p for p in out if reading.file(p).kind is not Kind.NOT_BUILT]
    return built, len(out) - len(built)


def built_only(found: list[Candidate], sources: dict[Path, Source], kconfig: str, reach: Reachability,
               say: Say) -> list[Candidate]:  # fmt: skip
    """The candidates in code the kconfig builds (``--only-built``): one in a unit it does not build (an ``#ifdef``
    in a built file) is not sent to the model, and the skipped ones are counted in a step."""
    built = {s.rel: set(reach.built(s.path, "\n".join(s.lines), s.units, kconfig)) for s in sources.values()}
    kept = [c for c in found if c.unit in built[c.rel]]
    if len(kept) < len(found):
        say(f"{len(found) - len(kept)} candidates in code the configuration does not build, skipped (--only-built)")
    return kept


def candidates(origin: Origin, scan: spatch.Scan, sources: dict[Path, Source]) -> list[Candidate]:
    """One candidate per unit with a match, the finding's own unit left out, at its first matched line."""
    own = sources.get(origin.path)
    mine = _unit_at(own.units, origin.line) if own else None
    out: dict[tuple[Path, int], Candidate] = {}
    for m in sorted(scan.matches, key=lambda m: (str(m.path), m.line)):
        source = sources.get(m.path)
        unit = _unit_at(source.units, m.line) if source else None
        if source is None or unit is None or (m.path == origin.path and unit == mine):
            continue
        out.setdefault((m.path, unit.start_line), Candidate(source.rel, unit, m.line))
    return list(out.values())


def alert(origin: Origin, line: int) -> Alert:
    """The candidate's question to the model, as an analyzer alert on the matched line."""
    text = (
        f"same pattern as the finding at {origin.rel}:{origin.line} ({origin.title}), found by its Coccinelle rule; "
        "is this the same bug?"
    )
    return Alert.of(TOOL, "variant", line, text, origin.cwe)


def judge(candidate: Candidate, raws: list[dict]) -> list[dict]:
    """The variant's findings among a unit's (those carrying its alert's verdict), and its verdict from them."""
    mine = [f for f in raws if isinstance(f.get("witness"), dict) and f["witness"].get("tool") == TOOL]
    for f in mine:
        verdict = f.get("verdict") if isinstance(f.get("verdict"), dict) else None
        candidate.verdict = "refuted" if verdict and verdict.get("verdict") == "refuted" else "confirmed"
        candidate.reason = str(verdict.get("reason", "")) if verdict else f.get("message", "")
    return mine


async def triage(pool: Pool, origin: Origin, hunt: Hunt, sources: dict[Path, Source]) -> None:
    """Each candidate audited through the audit service with its alert (so with the settings every front end
    audits with: witnesses, refutation, the baseline); the verdicts and the variants' rows into
    ``hunt.candidates``."""
    by_rel = {s.rel: s for s in sources.values()}
    asked: dict[str, dict[int, Candidate]] = {}  # rel -> the unit's first line -> its candidate
    for c in hunt.candidates:
        asked.setdefault(c.rel, {})[c.unit.start_line] = c
    docs = {
        service.Document(
            by_rel[rel].path, origin.root, rel, "\n".join(by_rel[rel].lines), units_at=frozenset(mine),
            units=by_rel[rel].units, alerts=tuple(alert(origin, c.line) for c in mine.values()),
        ): mine
        for rel, mine in asked.items()
    }  # fmt: skip

    left: list[Candidate] = []  # no daemon could take them

    def failed(doc: service.Document, unit: Unit, why: str) -> None:
        candidate = docs[doc][unit.start_line]
        candidate.verdict, candidate.reason = "failed", why

    def told(event: service.Event) -> None:
        if isinstance(event, service.UnitDone):
            candidate = docs[event.doc][event.result.unit.start_line]
            judge(candidate, event.result.findings)
            source = by_rel[candidate.rel]
            candidate.rows = [
                row(source, r, why) for r, why in event.findings if _variant(r) and why in (None, pipeline.REFUTED)
            ]
        elif isinstance(event, service.FileDone):
            file = event.outcome
            for f in file.failed:
                failed(event.doc, f.target.unit, f"not audited ({f.code}): {f.message}")
            left.extend(docs[event.doc][t.unit.start_line] for t in file.left)
            for c in docs[event.doc].values() if file.error is not None else ():
                c.verdict, c.reason = "failed", file.error

    job = service.Job(priority=Priority.INTERACTIVE, baseline=suppress.Baseline.load(origin.root))
    outcome = await service.AuditService(pool).audit(list(docs), told, job)
    for c in left:  # why no daemon took them is known once the job is over
        c.verdict, c.reason = "failed", f"{outcome.summary.unavailable}"
    if outcome.summary.left:
        hunt.errors.append(f"{len(outcome.summary.left)} candidates not audited: {outcome.summary.unavailable}")


def _variant(r: pipeline.Reportable) -> bool:
    """A finding that answers a variant's alert (the model's triage of it), not another finding of the unit."""
    return r.finding.witness is not None and r.finding.witness.tool == TOOL


async def hunt(pool: Pool, origin: Origin, settings: Settings = Settings(), say: Say = lambda _: None, *,
               rule: str | None = None) -> Hunt:  # fmt: skip
    """The whole search for ``origin``'s variants; ``rule``: this one (checked and tried the same way) instead of
    the model's. Never raises for a daemon, spatch or rule problem: ``Hunt.errors`` says it."""
    out = Hunt(origin)
    own, unread, skipped = read_sources([origin.path], origin.root, pool.options.kernel_macros)
    if not own:
        out.errors += unread + skipped
        return out
    unit = _unit_at(own[0].units, origin.line)
    if unit is None:
        out.errors.append(f"{origin.rel}:{origin.line} is in no function: a variant search starts from one")
        return out
    try:
        spatch.executable()  # before the model is asked: without spatch no rule can be tried
        if rule is None:
            await write_rule(pool, origin, unit, out, settings, say)
        else:
            await take_rule(rule, origin, out, settings)
    except spatch.SpatchUnavailable as exc:
        out.errors.append(str(exc))
        return out
    if out.rule is None:
        return out
    try:
        out.rule_path = save_rule(origin, out.rule)
    except OSError as exc:  # a read-only tree: the search goes on, the rule is in the report
        out.errors.append(f"the rule could not be saved in {origin.root / RULES_DIR}: {exc.strerror or exc}")
    reach = Reachability()  # the kconfig read once for the files and the candidates
    try:
        files, unbuilt = workspace_files(pool, origin.root, reach)
    except ConfigError as exc:
        out.errors.append(str(exc))
        return out
    say(f"spatch over {len(files):,} C files" + (f" ({unbuilt:,} not built, skipped: --only-built)" if unbuilt else ""))
    out.scan = await asyncio.to_thread(spatch.search, out.rule, files, origin.root, settings.bounds)
    matched = sorted({m.path for m in out.scan.matches} | {origin.path})
    read, unread, _ = read_sources(matched, origin.root, pool.options.kernel_macros)
    out.errors += unread
    sources = {s.path: s for s in read}
    out.candidates = candidates(origin, out.scan, sources)
    if (kconfig := pool.options.kconfig) and pool.options.only_built():
        out.candidates = built_only(out.candidates, sources, kconfig, reach, say)
    if out.candidates:
        say(f"the model triages {len(out.candidates)} candidates")
        await triage(pool, origin, out, sources)
    return out
