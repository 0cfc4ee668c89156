"""`k3lsp status` with one and with several `--endpoint`s against real daemons: a table with a column per
daemon, or JSON; a daemon that does not answer is named and makes the exit status 2."""

from __future__ import annotations

import json

from k3lsp import __version__
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere

FIGURES = (
    "model",
    "experts",
    "ranks",
    "queued",
    "tokens/s",
    "thinking effort (default)",
    "reasoning tokens",
    "response tokens",
    "loop rate",
    "ended on stop token",
)


def test_one_endpoint_json_is_one_object(slow_pair, tmp_path):
    result = k3lsp("status", "--endpoint", slow_pair[0].endpoint, "--json", cache=tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["endpoint"] == slow_pair[0].endpoint
    assert body["welcome"]["model"] == body["status"]["model"]
    assert body["welcome"]["server"] == __version__  # the daemon's version, its `server` row in the table
    for key in (
        "experts",
        "ranks",
        "queued",
        "tokens_per_s",
        "loop_rate",
        "stop_rate",
        "reasoning_tokens",
        "response_tokens",
    ):
        assert key in body["status"], key
    assert body["welcome"]["limits"]["thinking_effort"] == "low"


def test_several_endpoints_give_a_column_each_and_a_down_one_is_named(slow_pair, tmp_path):
    a, b = slow_pair
    table = k3lsp(
        "status",
        "--endpoint",
        a.endpoint,
        "--endpoint",
        b.endpoint,
        cache=tmp_path,
        cwd=tmp_path,
        env={"COLUMNS": "300"},
    )  # wide enough for two socket paths as column headers
    assert table.returncode == 0, table.stderr
    header = next(line for line in table.stdout.splitlines() if a.endpoint in line)
    assert b.endpoint in header
    for figure in FIGURES:
        assert any(line.lstrip("│ ").startswith(figure) for line in table.stdout.splitlines()), figure
    (server,) = [line for line in table.stdout.splitlines() if line.lstrip("│ ").startswith("server ")]
    assert server.count(__version__) == 2, server  # each daemon's version, beside the client's line

    down = nowhere(tmp_path)
    mixed = k3lsp("status", "--endpoint", a.endpoint, "--endpoint", down, "--json", "--timeout", "2",
                  cache=tmp_path, cwd=tmp_path)  # fmt: skip
    assert mixed.returncode == 2
    assert f"{down} is not reachable" in mixed.stderr
    first, second = json.loads(mixed.stdout)
    assert first["endpoint"] == a.endpoint and first["status"]["experts"] == first["welcome"]["experts"]
    assert second["endpoint"] == down and second["status"] is None and "not reachable" in second["error"]


def test_a_loading_daemon_is_shown_as_loading_with_its_percentage():
    """What `k3lsp status` prints for a daemon's status while it reads its model (the map serve sends then)."""
    from rich.console import Console

    from k3lsp.cli.terminal import DaemonStatus, print_status

    status = {
        "model": "Kimi-K3-Audit-451E",
        "state": "loading",
        "open_requests": 1,
        "loading": {
            "state": "loading",
            "stage": "weights",
            "bytes_done": 84,
            "bytes_total": 200,
            "percent": 42,
            "seconds": 61.5,
            "eta_seconds": 84.9,
        },
    }
    console = Console(record=True, width=120)
    print_status([DaemonStatus("tcp://mac-a:5555", {"model": "Kimi-K3-Audit-451E"}, status)], console)
    text = console.export_text()
    assert any(
        line.lstrip("│ ").startswith("state") and "backend loading (42 %, about 85 s left)" in line
        for line in text.splitlines()
    ), text
