"""Fixtures for the editor-side tests: the demo corpus in examples/, a scripted daemon per test module, and the
fake auditor's script (the ``logic`` tier). Nothing here imports the backend until a daemon is asked for: the
logic tier runs where mlx is not installed."""

from pathlib import Path

import pytest

from tests.lsp import scripted
from tests.support.fake_auditor import FakeScript

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


def example_text(name: str) -> str:
    return (EXAMPLES / name).read_text()


@pytest.fixture(scope="module")
def daemon(tiny_model):
    """A real `k3-backend serve` on the tiny checkpoint answering with tests/lsp/scripted.py's findings."""
    from tests.support.daemon import serving

    with serving(tiny_model, script=scripted.SCRIPT, args=scripted.DAEMON_ARGS) as d:
        yield d


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    """The fake auditor's script, answering with the same findings as the scripted daemon (``scripted.FAKE``)."""
    script = FakeScript(tmp_path / "fake-auditor.json")
    script.write(scripted.FAKE)
    return script
