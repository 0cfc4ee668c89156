"""`./uv` installs the uv it pins, checked by hash, and nothing else.

The attack: on a machine without uv, `./uv` ran `pip install uv`: whatever version, from whatever index pip was
configured with, unchecked, while everything uv then installs is locked with hashes (uv.lock). An index or a
find-links directory that serves its own "uv" wheel ran its code as the developer, and in CI. Now the script
installs `uv==UV_VERSION` with pip's --require-hashes (the hashes of PyPI's wheels), binary wheels only.

The attack test is offline and cheap: pip sees only a forged uv wheel of the pinned version. The real bootstrap
from PyPI in a fresh HOME with no uv on PATH is opt-in (K3_TEST_UV_BOOTSTRAP=1): it downloads uv.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = (REPO / "uv").read_text()
VERSION = re.search(r"^UV_VERSION=(\S+)$", SCRIPT, re.M).group(1)


def _python_dir() -> str:
    """A directory with a python3 that has venv, and no uv in it."""
    for candidate in ("/usr/bin/python3", sys.executable):
        if subprocess.run([candidate, "-c", "import ensurepip, venv"], capture_output=True).returncode == 0:
            bin_dir = Path(candidate).parent
            if not (bin_dir / "uv").exists():
                return str(bin_dir)
    pytest.skip("no python3 with venv and ensurepip outside a directory that has uv")


def _bootstrap(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`./uv --version` from a fresh copy of the script (its own .cache), in a fresh HOME, with no uv on PATH."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy2(REPO / "uv", checkout / "uv")
    home = tmp_path / "home"
    home.mkdir()
    base = {"PATH": f"{_python_dir()}:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [str(checkout / "uv"), "--version"], cwd=checkout, env=base | env, capture_output=True, text=True, timeout=600
    )


def _forged_wheel(directory: Path, marker: Path) -> Path:
    """A wheel named like uv's pinned version whose `uv` script leaves ``marker`` behind when it runs."""
    name = f"uv-{VERSION}"
    files = {
        f"{name}.data/scripts/uv": f"#!/bin/sh\ntouch {marker}\necho uv {VERSION}\n",
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: uv\nVersion: {VERSION}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: forged\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{name}.dist-info/RECORD"] = "\n".join([*record, f"{name}.dist-info/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            info = zipfile.ZipInfo(path)
            info.external_attr = 0o755 << 16
            archive.writestr(info, text)
    return wheel


def test_a_forged_uv_wheel_is_refused(tmp_path):
    wheels = tmp_path / "index"
    wheels.mkdir()
    marker = tmp_path / "the-forged-uv-ran"
    _forged_wheel(wheels, marker)
    # pip sees nothing but the forged wheel: no configuration files, no index, only that directory.
    pip = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    done = _bootstrap(tmp_path, pip)
    assert not marker.exists(), done.stdout + done.stderr
    installed = tmp_path / "checkout" / ".cache" / "uv-bootstrap" / "bin" / "uv"
    assert not installed.exists() or str(marker) not in installed.read_text(errors="replace"), "the forgery is in"
    assert f"./uv: uv is not on PATH; installing uv {VERSION} into" in done.stderr  # the phase, said first (issue 39)
    assert done.returncode == 1 and "could not create a virtual environment with uv" in done.stderr, done.stderr
    assert "hash" in done.stderr.lower(), done.stderr  # pip says why: the wheel's hash is not a pinned one


def test_the_pin_names_one_version_with_a_hash_per_supported_platform():
    requirement = re.search(r'^UV_REQUIREMENT="(.*?)"$', SCRIPT, re.M | re.S).group(1)
    assert requirement.startswith("uv==$UV_VERSION ")
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", requirement)
    platforms = re.findall(r"^# uv-" + re.escape(VERSION) + r"-py3-none-(\S+)\.whl$", SCRIPT, re.M)
    assert len(hashes) == len(set(hashes)) == len(platforms) >= 4
    for wanted in ("manylinux_2_17_x86_64", "aarch64", "macosx_11_0_arm64", "macosx_10_12_x86_64"):
        assert any(wanted in p for p in platforms), (wanted, platforms)
    assert "--require-hashes" in SCRIPT and "--only-binary :all:" in SCRIPT


@pytest.mark.skipif(os.environ.get("K3_TEST_UV_BOOTSTRAP") != "1", reason="downloads uv: K3_TEST_UV_BOOTSTRAP=1")
def test_the_bootstrap_installs_the_pinned_uv_in_a_fresh_home(tmp_path):
    done = _bootstrap(tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"uv {VERSION}"), done.stdout
    assert f"./uv: uv {VERSION} installed; uv now sets up the project's environment" in done.stderr  # what comes next
