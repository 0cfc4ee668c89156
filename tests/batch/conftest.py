"""Daemons the batch tests share: real `k3-backend serve` processes with scripted answers, one per role."""

import pytest

from tests.batch import corpus
from tests.support.daemon import serving


@pytest.fixture(scope="package")
def corpus_daemon(tiny_model):
    """Answers `corpus.tree` with its known findings."""
    with serving(tiny_model, script=corpus.script(), args=corpus.DAEMON_ARGS) as d:
        yield d


@pytest.fixture(scope="package")
def slow_pair(tiny_model):
    """Two daemons that generate `corpus.SLOW_TOKENS` tokens for every unit."""
    with serving(tiny_model, script=corpus.SLOW_SCRIPT) as a, serving(tiny_model, script=corpus.SLOW_SCRIPT) as b:
        yield a, b
