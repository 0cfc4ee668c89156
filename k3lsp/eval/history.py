"""The fix commits of a repository: each commit F whose ``Fixes: <sha>`` tag names the commit I that brought the
bug in, the method kernel review bots are judged by.

A case is one (F, I) pair, keyed by the full ids its names resolve to: a fix listed twice, or tagging the same
commit as ``Fixes: <12 hex>`` and ``Fixes: <7 hex>``, is one case. It counts only when the tag resolves in this
repository to one commit, F is neither a merge nor a root commit (its parent is the tree the fix was made on) and I
is not a merge (a merge is no patch to review); and, checked lazily as the sample is drawn, I touches C (a file the
``include``/``exclude`` settings admit, ``**/*.c`` and ``**/*.h`` by default). Everything passed over is counted by
reason, so the report says what the rate is a rate of.

The sample is reproducible: the cases in ``git log`` order, shuffled by ``random.Random(seed)``, then taken in that
order until ``n`` are admitted. The same repository, range (or list), seed and ``n`` give the same cases.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.eval import git

FIXES_TAG = re.compile(r"^[ \t]*Fixes:[ \t]*([0-9a-fA-F]{7,64})\b", re.MULTILINE | re.IGNORECASE)
FIXES_GREP = r"^[[:space:]]*fixes:[[:space:]]*[0-9a-f]{7,}"  # git log's prefilter: the same tags


@dataclass(frozen=True)
class Case:
    fix: str  # F: the full id of the fix commit
    introducing: str  # I: the full id of the commit its Fixes: tag names
    subject: str  # F's subject line


@dataclass
class Selection:
    cases: list[Case]
    considered: int = 0  # fix commits looked at
    skipped: Counter[str] = field(default_factory=Counter)  # why a commit or tag was passed over -> how many


def candidates(repo: Path, revs: Sequence[str], *, listed: bool = False) -> Selection:
    """The (F, I) pairs of the fix commits in ``revs`` (a range for ``git log``; with ``listed``, exactly these
    commits, e.g. the fixes of published CVEs), before the C check."""
    if listed:
        revs = [git.check_revision(r) for r in revs]
    found = git.commits(repo, revs, grep=None if listed else FIXES_GREP, walk=not listed)
    found = list({record[0]: record for record in found}.values())  # a commit listed in two spellings: once
    out = Selection([], considered=len(found))
    tagged: list[tuple[str, str, list[str]]] = []
    for sha, parents, message in found:
        tags = list(dict.fromkeys(m.lower() for m in FIXES_TAG.findall(message)))
        if not tags:
            out.skipped["no Fixes: tag"] += 1
        elif len(parents) > 1:
            out.skipped["the fix is a merge"] += 1
        elif not parents:
            out.skipped["the fix is a root commit"] += 1
        else:
            tagged.append((sha, message.split("\n", 1)[0].strip(), tags))
    resolved = git.resolve(repo, [t for _, _, tags in tagged for t in tags])
    introducing = {r for r in resolved.values() if r is not None}
    parents_of = {sha: parents for sha, parents, _ in git.commits(repo, sorted(introducing), walk=False)}
    for fix, subject, tags in tagged:
        named = [resolved[tag] for tag in tags]
        if None in named:
            out.skipped["the Fixes: tag names no commit here"] += named.count(None)
        for sha in dict.fromkeys(n for n in named if n is not None):  # `Fixes: <12 hex>` and `<7 hex>`: one case
            if sha == fix:
                out.skipped["the Fixes: tag names the fix itself"] += 1
            elif len(parents_of.get(sha, ())) > 1:
                out.skipped["the introducing commit is a merge"] += 1
            else:
                out.cases.append(Case(fix, sha, subject))
    return out


def sample(repo: Path, selection: Selection, n: int | None, seed: int, wants: Callable[[str], bool]) -> Selection:
    """Up to ``n`` cases (all with None) whose introducing commit touches a file ``wants`` admits, drawn as the
    module says; the ones passed over are added to the counts."""
    order = list(selection.cases)
    if n is not None:
        random.Random(seed).shuffle(order)
    out = Selection([], selection.considered, Counter(selection.skipped))
    touches: dict[str, bool] = {}
    for case in order:
        if n is not None and len(out.cases) >= n:
            break
        if case.introducing not in touches:
            touches[case.introducing] = any(wants(p) for p in git.touched_files(repo, case.introducing))
        if touches[case.introducing]:
            out.cases.append(case)
        else:
            out.skipped["the introducing commit touches no C"] += 1
    return out
