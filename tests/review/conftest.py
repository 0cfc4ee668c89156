"""The review tests' daemons: the fake (``fake``: the logic tier, the real audit core above a scripted transport)
and a real scripted ``k3-backend serve`` (``daemon``), both answering with the findings of ``FINDINGS``."""

from __future__ import annotations

import pytest

from tests.support import kimi
from tests.support.daemon import serving
from tests.support.fake_daemon import FakeScript

# Per unit (as the patch of repos.DRIVER_PATCHED leaves it): what the model reports, lines relative to the unit.
COPY = kimi.finding(
    cwe=787, severity="high", title="copy_from_user length is not bounded", start_line=3, end_line=3,
    message="r->len + n is chosen by the caller and never checked against sizeof(r->buf)",
    trace=[{"line": 1, "note": "n from user space"}, {"line": 3, "note": "copied without a bound"}],
)  # fmt: skip
INDEX = kimi.finding(cwe=125, severity="medium", title="unchecked index", start_line=3, end_line=3, trace=[])
CALLER = kimi.finding(cwe=20, severity="low", title="n passed on unchecked", start_line=3, end_line=3, trace=[])
FINDINGS = {"drv_read": [COPY], "drv_index": [INDEX], "drv_ioctl": [CALLER]}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test its own result cache and symbol index (under K3LSP_CACHE_DIR)."""
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    script = FakeScript(tmp_path / "fake-daemon.json")
    script.write({"units": {unit: {"findings": found} for unit, found in FINDINGS.items()}})
    return script


@pytest.fixture(scope="package")
def daemon(tiny_model):
    """A real daemon answering FINDINGS through the real engine."""
    script = [
        {"unit": u, "turns": [kimi.turn(*(("report_finding", f) for f in found))]} for u, found in FINDINGS.items()
    ]
    with serving(tiny_model, script=[*script, {"unit": "*", "turns": [kimi.turn(content="no findings")]}]) as d:
        yield d
