"""An audited repository never runs its own code: every Python process the project starts imports the project's
code, not a ``k3lsp/`` or ``backend/`` package lying in the current directory.

Each test plants such packages (their ``__init__`` writes a marker file) in the directory a process starts in:
the grep child of the model's tools, `k3lsp audit` run inside the repository, the daemon started by the demo's
launcher. The editors' launch commands are covered in tests/editors (Neovim for real, VS Code through the
command line the extension builds).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from k3lsp.tools import sandbox
from tests.support import kimi
from tests.support.batch import k3lsp_env
from tests.support.daemon import serving

GREPPER_C = "static int grepper(int n)\n{\n\treturn n + 1;\n}\n"


def script() -> list[dict]:
    return [
        {"unit": "grepper", "turns": [kimi.turn(("grep", {"pattern": "return"})), kimi.turn(content="nothing")]},
        {"unit": "*", "turns": [kimi.turn(content="no findings")]},
    ]


def plant(repo: Path, marker: Path, *packages: str) -> None:
    """Hostile packages in ``repo`` that leave ``marker`` behind if anything imports them."""
    for name in packages:
        (repo / name).mkdir(parents=True)
        (repo / name / "__init__.py").write_text(
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran {name} from the repository')\n"
        )


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "evil"
    (root / "src").mkdir(parents=True)
    (root / "src" / "grepper.c").write_text(GREPPER_C)
    return root


@pytest.fixture(scope="module")
def daemon(tiny_model, tmp_path_factory):
    """Started from a directory holding hostile `backend` and `k3lsp` packages, as `k3-backend demo` would be."""
    cwd = tmp_path_factory.mktemp("daemon-cwd")
    marker = cwd.parent / "daemon-marker"
    plant(cwd, marker, "backend", "k3lsp")
    with serving(tiny_model, script=script(), args=["--max-tokens", "512"], cwd=cwd) as d:
        yield d, marker


def test_the_daemon_launcher_imports_nothing_from_its_directory(daemon):
    started, marker = daemon
    assert started.proc.poll() is None
    assert not marker.exists(), marker.read_text()


def test_the_grep_child_imports_nothing_from_the_workspace(repo, tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    plant(repo, marker, "k3lsp")
    monkeypatch.chdir(repo)  # the language server runs in the workspace
    ok, text = sandbox.run_tool(repo, "grep", {"pattern": "return n"})
    assert not marker.exists(), marker.read_text()
    assert ok and "src/grepper.c:3:" in text, text


def test_k3lsp_audit_inside_the_repository_runs_none_of_its_code(daemon, repo, tmp_path):
    started, _ = daemon
    marker = tmp_path / "marker"
    plant(repo, marker, "k3lsp")
    k3lsp = Path(sys.executable).with_name("k3lsp")  # the installed command, as a user runs it
    done = subprocess.run(
        [str(k3lsp), "audit", "src", "--endpoint", started.endpoint],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=180,
        env=k3lsp_env(tmp_path / "cache"),
    )
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 audited" in done.stdout
