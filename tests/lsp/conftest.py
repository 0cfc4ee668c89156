"""Fixtures for the editor-side tests: the demo corpus in examples/ and a scripted daemon per test module."""

from pathlib import Path

import pytest

from tests.lsp import scripted
from tests.support.daemon import serving

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


def example_text(name: str) -> str:
    return (EXAMPLES / name).read_text()


@pytest.fixture(scope="module")
def daemon(tiny_model):
    """A real `k3-backend serve` on the tiny checkpoint answering with tests/lsp/scripted.py's findings."""
    with serving(tiny_model, script=scripted.SCRIPT, args=scripted.DAEMON_ARGS) as d:
        yield d
