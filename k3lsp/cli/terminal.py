"""Human-readable terminal output of the CLI (rich tables and progress); JSON output stays in the commands.

Every value in a table comes from a daemon: cells are ``sanitize.rich`` Text (no markup, no controls); so does the
progress bar's note, a column that reads no markup."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from k3lsp.core.replies import loading_of
from k3lsp.wire import ending, sanitize


@dataclass(frozen=True)
class DaemonStatus:
    """What `k3lsp status` learnt from one endpoint: its welcome and status, or why it could not ask."""

    endpoint: str
    welcome: dict | None = None
    status: dict | None = None
    error: str | None = None

    def to_json(self) -> dict:
        out: dict = {"endpoint": self.endpoint, "welcome": self.welcome, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        return out


def _percent(value: object) -> str:
    return f"{value * 100:.1f} %" if isinstance(value, int | float) else "-"


def _queues(value: object) -> str | None:
    """``you 5/0/2, client-1a2b3c4d 190/188/2``: each client's requests open, waiting for a turn and running."""
    if not isinstance(value, dict):
        return None
    return (
        ", ".join(
            f"{who} {q.get('open')}/{q.get('waiting')}/{q.get('running')}"
            for who, q in value.items()
            if isinstance(q, dict)
        )
        or "none"
    )


# (row label, where the value is, how to show it): what an auditor checks before trusting the findings.
_ROWS: list[tuple[str, Callable[[dict, dict], object]]] = [
    ("state", lambda w, s: p.describe() if (p := loading_of(s)) is not None else s.get("state")),
    ("server", lambda w, s: w.get("server")),
    ("model", lambda w, s: w.get("model")),
    ("experts", lambda w, s: w.get("experts")),
    ("ranks", lambda w, s: w.get("ranks")),
    ("queued", lambda w, s: s.get("queued")),
    ("active", lambda w, s: s.get("active")),
    ("requests", lambda w, s: s.get("requests")),
    ("tokens/s", lambda w, s: s.get("tokens_per_s")),
    ("thinking effort (default)", lambda w, s: (w.get("limits") or {}).get("thinking_effort")),
    ("reasoning tokens", lambda w, s: s.get("reasoning_tokens")),
    ("response tokens", lambda w, s: s.get("response_tokens")),
    ("generations", lambda w, s: s.get("generations")),
    ("queues (open/waiting/running)", lambda w, s: _queues(s.get("queues"))),
    ("answered from the store", lambda w, s: (s.get("store") or {}).get("answered")),
    ("loop rate", lambda w, s: _percent(s.get("loop_rate"))),
    ("ended on stop token", lambda w, s: _percent(s.get("stop_rate"))),
]


def print_status(backends: Sequence[DaemonStatus], console: Console | None = None) -> None:
    """One column per endpoint, one row per figure; an endpoint that did not answer shows its error."""
    table = Table(title="k3 audit backends" if len(backends) > 1 else "k3 audit backend")
    table.add_column("", style="bold")
    for b in backends:
        table.add_column(sanitize.rich(b.endpoint))
    for label, value in _ROWS:
        cells = []
        for b in backends:
            shown = value(b.welcome or {}, b.status or {}) if b.error is None else None
            cells.append(sanitize.rich("-" if shown is None else shown))
        table.add_row(label, *cells)
    if any(b.error for b in backends):
        table.add_row("error", *(sanitize.rich(b.error or "") for b in backends), style="red")
    if console is None:
        console = Console()
        console.on_broken_pipe = ending.raise_broken_pipe  # rich would exit 1: end as every command does
    console.print(table)


class _TimeLeft(ProgressColumn):
    """``about 2:10 left``: the units left at the mean pace of the run so far, once one has finished (a unit takes
    seconds to minutes, so the mean of the whole run, not rich's last 30 s, which may hold no unit at all)."""

    def render(self, task: Task) -> Text:
        if not task.completed or task.total is None or task.elapsed is None or task.finished:
            return Text("")
        left = int(task.elapsed * (task.total - task.completed) / task.completed)
        minutes, seconds = divmod(left, 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"about {hours}:{minutes:02}:{seconds:02} left" if hours else f"about {minutes}:{seconds:02} left")


@contextlib.contextmanager
def progress_bar(enabled: bool, description: str = "auditing") -> Iterator[Callable[[int, int, str], None]]:
    """A units-done bar on stderr when ``enabled`` (a terminal), else a callback that prints nothing: the time
    spent, an estimate of the time left, and the note (the daemon's latest prefill or decode progress)."""
    if not enabled:
        yield lambda done, total, note="": None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        _TimeLeft(),
        TextColumn("{task.fields[note]}", markup=False),  # the daemon's words: never rich markup
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=None, note="")

        def update(done: int, total: int, note: str = "") -> None:
            progress.update(task, completed=done, total=total, **({"note": note} if note else {}))

        yield update


def write_report(path: Path | None, formats: dict[str, Callable[[TextIO], Any]], fmt: str, command: str) -> bool:
    """A command's report in ``fmt`` to ``path`` (None: stdout); False, said on stderr, when it cannot be written."""
    try:
        with open(path, "w", encoding="utf-8") if path else contextlib.nullcontext(sys.stdout) as out:
            formats[fmt](out)
    except OSError as exc:
        if path is None:  # stdout: a closed pipe ends the command quietly (k3lsp.wire.ending)
            raise
        print(f"k3lsp {command}: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def json_to(value: Callable[[], Any]) -> Callable[[TextIO], None]:
    """A writer of ``value()`` as indented JSON and a newline."""
    import json

    def write(out: TextIO) -> None:
        json.dump(value(), out, indent=2)
        out.write("\n")

    return write
