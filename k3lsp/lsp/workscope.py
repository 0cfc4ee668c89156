"""Before a workspace audit: what it will cost and, above ``askAboveUnits``, which code the person wants audited.

A whole Linux tree is about 530,000 units: twelve days of the tiny model here, months of prefill on the Mac pair.
Started from one command with no word, that is work nobody meant to ask for. So the audit first estimates its
cost: the units and the tokens of their code, from a sample of its files (``SAMPLE``, spread over the list; every
file of a smaller workspace) split as the audit splits them, scaled by bytes; the time at the daemon's own
measured prefill rate (its status: prefilled tokens over the seconds its engine spent prefilling), else at
``k3lsp audit``'s stated rate, in the words ``k3lsp.cli.admission`` uses for a named file over maxFileBytes. A
unit's prompt is more than its code (its file's context, the tool turns): once the daemon has audited, the time is
for the units' whole prompts at the mean it prefilled an audit; before, the code's time is said as a floor.

Above the setting it asks, with ``window/showMessageRequest``, for one of the scopes that apply:

- **changed code**: the files the work tree changed since ``baseRef`` (``k3lsp.core.scope``'s base), and in them
  only the units holding a changed line;
- **built code**, with the ``kconfig`` setting: the files the configuration builds (or cannot tell), and in them
  the units it builds;
- **a folder**: the deepest folder holding the files open in the editor;
- **everything**, or Cancel.

A client that cannot be asked (it declares no ``window.showMessage`` capability) is told the cost and gets the
first narrower scope that applies, with how to ask for another: ``k3lsp.auditWorkspace`` takes the scope as its
argument (``"changed"``, ``"built"``, ``"all"``, or a folder relative to the workspace), and then asks nothing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from k3lsp.cli import admission
from k3lsp.core import reachability, scope
from k3lsp.core.options import Options
from k3lsp.git import repo as gitrepo
from k3lsp.kbuild.state import Kind
from k3lsp.units.kernelc import Macros
from k3lsp.units.split import Unit

SAMPLE = 64  # files split for the estimate: a second or two in the splitter's process
CHANGED, BUILT, FOLDER, ALL = "changed", "built", "folder", "all"
CANCEL = "Cancel"
NOT_BUILT = reachability.ORDER[Kind.NOT_BUILT]  # Reachability.file_rank of a file the kconfig does not build

Split = Callable[[str, Macros], Awaitable[tuple[Unit, ...]]]


@dataclass(frozen=True)
class Scope:
    """What a workspace audit covers: one of CHANGED, BUILT, FOLDER (with its folder) or ALL."""

    kind: str
    folder: Path | None = None

    def title(self, root: Path) -> str:
        """The scope as a button of the question."""
        if self.kind == FOLDER and self.folder is not None:
            return f"Folder {self.folder.relative_to(root).as_posix()}/"
        return {CHANGED: "Changed code", BUILT: "Built code (kconfig)", ALL: "Everything"}[self.kind]

    def job_scope(self) -> str | None:
        """The audit service's scope for this one (``Job.scope``): changed code audits only the changed units."""
        return scope.CHANGED if self.kind == CHANGED else None


@dataclass(frozen=True)
class Estimate:
    """The units of a list of files and the characters of their code, measured on ``sampled`` of its ``files``."""

    units: int
    chars: float
    sampled: int
    files: int

    def said(self, status: dict) -> str:
        """The estimate in words, timed with what the daemon's ``status`` says it measured."""
        counted = f"{self.units:,} units" if self.sampled == self.files else f"about {self.units:,} units"
        prompt = measured_prompt(status)
        prompts = None if prompt is None else admission.Prompts(self.units, *prompt)
        return f"{self.files:,} files, " + admission.estimate(counted, self.chars, measured_rate(status), prompts)


async def estimate(files: Sequence[Path], split: Split, macros: Macros) -> Estimate:
    """Split a sample of the files (every ``len/SAMPLE``-th) and scale its units and code by bytes."""
    step = max(1, -(-len(files) // SAMPLE))
    sample = list(files[::step])
    sizes = await asyncio.to_thread(lambda: [_size(p) for p in files])
    total, sampled_bytes, units, chars = sum(sizes), sum(sizes[::step]), 0, 0
    for path in sample:
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        except OSError:
            continue
        split_units = await split(text, macros)
        units += len(split_units)
        chars += sum(len(u.text) for u in split_units)
    scale = total / sampled_bytes if sampled_bytes else 1.0
    return Estimate(round(units * scale), chars * scale, len(sample), len(files))


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def measured_rate(status: dict) -> float | None:
    """The prefill rate the first connected daemon measured (``k3lsp.status``'s ``backend.engine``: tokens prefilled
    over its engine's prefill seconds); None before it has prefilled anything, or with no daemon connected."""
    engine = _backend(status).get("engine")
    if not isinstance(engine, dict):
        return None
    tokens, seconds = engine.get("prefilled_tokens"), (engine.get("step_seconds") or {}).get("prefill")
    if isinstance(tokens, int | float) and isinstance(seconds, int | float) and tokens > 0 and seconds > 0:
        return tokens / seconds
    return None


def measured_prompt(status: dict) -> tuple[float, int] | None:
    """The tokens one audit's prompt cost the first connected daemon to prefill (its cached prefix left out),
    on average, and over how many audits; None before it has audited anything, or with no daemon connected."""
    backend = _backend(status)
    audits, tokens = backend.get("audits_prefilled"), backend.get("audit_prefilled_tokens")
    if isinstance(audits, int) and isinstance(tokens, int) and audits > 0 and tokens > 0:
        return tokens / audits, audits
    return None


def _backend(status: dict) -> dict:
    """The first connected daemon's own status in ``k3lsp.status`` (empty with none connected)."""
    backend = status.get("backend")
    return backend if isinstance(backend, dict) else {}


def offered(root: Path, options: Options, open_paths: set[Path], in_git: bool) -> list[Scope]:
    """The scopes that apply, narrowest first, everything last."""
    out = [Scope(CHANGED)] if in_git else []
    if options.kconfig:
        out.append(Scope(BUILT))
    inside = [p for p in open_paths if p.is_relative_to(root)]
    if inside:
        folder = Path(os.path.commonpath([p.parent for p in inside]))
        if folder != root:
            out.append(Scope(FOLDER, folder))
    return [*out, Scope(ALL)]


def in_git(root: Path, options: Options) -> bool:
    """Whether the workspace has a base to tell changed code from (blocking)."""
    try:
        gitrepo.Repository(root, options.max_file_bytes).base(options.base_ref)
    except gitrepo.GitError:
        return False
    return True


def parse(asked: str, root: Path) -> Scope | str:
    """The command's argument as a scope, or why it is none."""
    if asked in (CHANGED, BUILT, ALL):
        return Scope(asked)
    folder = (root / asked).resolve()
    if not folder.is_relative_to(root.resolve()) or not folder.is_dir():
        return f"k3lsp.auditWorkspace: {asked!r} is neither changed, built, all nor a folder of the workspace"
    return Scope(FOLDER, folder)


def narrowed(
    chosen: Scope, files: list[Path], root: Path, options: Options, built: Callable[[Path], int]
) -> list[Path]:
    """The files of the workspace the scope covers, in their order (blocking: git, the kconfig)."""
    if chosen.kind == FOLDER and chosen.folder is not None:
        return [p for p in files if p.resolve().is_relative_to(chosen.folder)]
    if chosen.kind == BUILT:
        return [p for p in files if built(p) < NOT_BUILT]
    if chosen.kind == CHANGED:
        changed = changed_files(root, options)
        return [p for p in files if p.resolve() in changed]
    return files


def changed_files(root: Path, options: Options) -> set[Path]:
    """The files the work tree changed (untracked ones included) since the scope's base."""
    try:
        repo = gitrepo.Repository(root, options.max_file_bytes)
        deltas = repo.worktree_deltas(repo.base(options.base_ref).commit)
    except gitrepo.GitError:
        return set()
    if repo.workdir is None:
        return set()
    return {(repo.workdir / d.new_path).resolve() for d in deltas if d.new_path is not None}
