"""`k3lsp status` names the client's version beside the daemons' (their `server` row), so a mismatch is seen
where the daemons are checked."""

from __future__ import annotations

from k3lsp import __version__
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere


def test_status_prints_the_clients_version(tmp_path):
    down = [nowhere(tmp_path / "a"), nowhere(tmp_path / "b")]  # two: the table is printed though none answers
    result = k3lsp("status", "--endpoint", down[0], "--endpoint", down[1], "--timeout", "1", cache=tmp_path,
                   cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "│ server " in result.stdout  # the daemons' row (none answered here)
    assert f"client: k3lsp {__version__}" in result.stdout.splitlines()
