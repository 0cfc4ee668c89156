"""The editor's "changed code" scope (``scope: changed``): only what the work tree changed since a base is audited
and shown, as Snyk's net-new issues, Semgrep's ``onlyGitDirty`` or Sonar's new code do.

The base is ``baseRef`` when set, else the merge-base of HEAD with its branch's upstream (what the branch
changed), else HEAD (``k3lsp.git.repo.Repository.base``). A document's changed lines are those of its current
text that differ from the file in the base (``k3lsp.git.patches``: added or modified lines, and the line after a
pure deletion): a unit holding none is not sent on open or save, and a finding is shown only when its lines
meet them. A file the base does not have is changed on every line; a file outside every git repository has no
base, so the whole of it counts (and the status says so). The repository is read as ``k3lsp review`` reads
it: through libgit2, running none of its code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from k3lsp.core.options import SCOPES
from k3lsp.git import patches
from k3lsp.git import repo as gitrepo
from k3lsp.units.split import Unit

ALL, CHANGED = SCOPES


@dataclass(frozen=True)
class Changed:
    """A document's lines the work tree changed since the base (1-based; None: every line), and the base."""

    lines: frozenset[int] | None
    base: str  # for the status: which base is used, or why there is none

    def touches(self, unit: Unit) -> bool:
        """Whether the unit holds a changed line (it is audited)."""
        return self.lines is None or any(unit.start_line < n <= unit.end_line + 1 for n in self.lines)

    def meets(self, first: int, last: int) -> bool:
        """Whether 0-based file lines first..last hold a changed line (a finding there is shown)."""
        return self.lines is None or any(first < n <= last + 1 for n in self.lines)


def changed(path: Path, text: str, base_ref: str, max_bytes: int) -> Changed:
    """What the work tree changed in the file at ``path`` (its text ``text``) since the base. Blocking: call it
    off the event loop."""
    try:
        repo = gitrepo.Repository(path.parent, max_bytes)
        base = repo.base(base_ref)
    except gitrepo.GitError as exc:
        return Changed(None, f"no base ({exc}): every line counts")
    if repo.workdir is None or not path.resolve().is_relative_to(repo.workdir):
        return Changed(None, "no base (not in a work tree): every line counts")
    old = repo.tree(base.commit).read(path.resolve().relative_to(repo.workdir).as_posix()) or b""
    lines = patches.changed_lines(patches.between(old, patches.encode(text)))
    return Changed(frozenset(lines), base.label)


def describe(scope: str, bases: Iterable[str]) -> str:
    """The status's note on the scope: every line, or the changes since which base."""
    if scope == ALL:
        return "all code"
    named = sorted(set(bases))
    return f"changed code since {'; '.join(named)}" if named else "changed code"
