"""Fixtures for the editor-side tests: the demo corpus in examples/, a scripted daemon per test module, and the
fake daemon's script (the ``logic`` tier). Nothing here needs mlx or transformers until a daemon is asked for:
the logic tier runs where the backend is not installed."""

from pathlib import Path

import pytest

from tests.lsp import scripted
from tests.support.daemon import module_daemon
from tests.support.fake_daemon import FakeScript

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


def example_text(name: str) -> str:
    return (EXAMPLES / name).read_text()


# A real `k3-backend serve` on the tiny checkpoint answering with tests/lsp/scripted.py's findings.
daemon = module_daemon(lambda: scripted.SCRIPT, scripted.DAEMON_ARGS)


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    """The fake daemon's script, answering with the same findings as the scripted daemon (``scripted.FAKE``)."""
    script = FakeScript(tmp_path / "fake-auditor.json")
    script.write(scripted.FAKE)
    return script
