"""Human-readable terminal output of the CLI (tables with rich); JSON output stays in the commands."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _percent(value: object) -> str:
    return f"{value * 100:.1f} %" if isinstance(value, int | float) else "-"


def print_status(welcome: dict, status: dict, console: Console | None = None) -> None:
    """The daemon's identity and health as one table: what an auditor checks before trusting the findings."""
    table = Table(title=f"k3-backend {welcome.get('server', '?')}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    rows = [
        ("model", welcome.get("model")),
        ("experts", welcome.get("experts")),
        ("ranks", welcome.get("ranks")),
        ("queued", status.get("queued")),
        ("active", status.get("active")),
        ("tokens/s", status.get("tokens_per_s")),
        ("generations", status.get("generations")),
        ("loop rate", _percent(status.get("loop_rate"))),
        ("ended on stop token", _percent(status.get("stop_rate"))),
    ]
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    (console or Console()).print(table)
