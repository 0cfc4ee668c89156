"""`k3lsp audit --kconfig CONFIG [--only-built]`: which admitted units the auditor's kernel configuration builds.

On a kernel tree most code is not built in any one configuration, and a finding there is noise to the auditor.
With ``--kconfig`` admission says how many units are not built and why (the Makefile rule or the ``#if`` that
rules each file's out, ``k3lsp.kbuild``); with ``--only-built`` those units are left out before any daemon is
contacted. Units whose state cannot be told are audited.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from k3lsp.cli.admission import Admitted, shown
from k3lsp.kbuild.config import ConfigError
from k3lsp.kbuild.reach import Reach
from k3lsp.kbuild.state import Kind

FILES_NAMED = 5  # files named with their reason in the message, at most


def apply(admitted: Admitted, root: Path, kconfig: str, only_built: bool) -> None:
    """Counts the admitted units by state under ``kconfig``, says so in a warning (a bad ``kconfig`` is an error),
    and with ``only_built`` leaves out the units that are not built."""
    try:
        reach = Reach.of(root, kconfig)
    except ConfigError as error:
        admitted.errors.append(str(error))
        admitted.sources = []
        return
    kinds: Counter[Kind] = Counter()
    unbuilt: dict[str, tuple[int, str]] = {}  # file as shown -> (units not built, the first one's reason)
    for n, source in enumerate(admitted.sources):
        states = reach.units(source.path, "\n".join(source.lines), [u.start_line + 1 for u in source.units])
        kinds.update(s.kind for s in states)
        dropped = [s for s in states if s.kind is Kind.NOT_BUILT]
        if dropped:
            unbuilt[shown(source.path)] = (len(dropped), dropped[0].reason)
        if only_built:
            kept = tuple(u for u, s in zip(source.units, states, strict=True) if s.kind is not Kind.NOT_BUILT)
            admitted.sources[n] = replace(source, units=kept)
    if unbuilt:
        admitted.warnings.append(_said(kconfig, kinds, unbuilt, only_built))


def _said(kconfig: str, kinds: Counter[Kind], unbuilt: dict[str, tuple[int, str]], only_built: bool) -> str:
    total = sum(kinds.values())
    what = ", skipped (--only-built)" if only_built else " (audited all the same; --only-built skips them)"
    named = sorted(unbuilt.items(), key=lambda item: -item[1][0])
    files = ", ".join(f"{count} in {path} ({reason})" for path, (count, reason) in named[:FILES_NAMED])
    more = f" and {len(named) - FILES_NAMED} more files" if len(named) > FILES_NAMED else ""
    counts = ", ".join(f"{kind.value} {kinds[kind]}" for kind in (Kind.BUILT_IN, Kind.MODULE, Kind.UNKNOWN))
    return f"kconfig {kconfig}: {kinds[Kind.NOT_BUILT]} of {total} units not built{what}: {files}{more}; {counts}"
