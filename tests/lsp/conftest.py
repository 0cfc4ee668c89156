"""Fixtures for the editor-side domain modules: the demo corpus in examples/."""

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


def example_text(name: str) -> str:
    return (EXAMPLES / name).read_text()
