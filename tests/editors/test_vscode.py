"""The VS Code extension's own checks, as part of the one test command: tsc, node unit tests, bundle, vsix.

editors/vscode/ci.sh type-checks the extension, runs its unit tests against a stubbed `vscode` module and the
real vscode-languageclient (also against the real `k3lsp` from this venv), bundles it with esbuild and packages
the .vsix with @vscode/vsce. The .vsix in the real workbench is test_vscode_workbench.py.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "editors" / "vscode"


def test_extension_type_checks_passes_its_tests_and_packages():
    if shutil.which("npm") is None:
        if os.environ.get("CI"):
            pytest.fail("npm is required in CI to build the VS Code extension")
        pytest.skip("npm is not installed: the VS Code extension cannot be built here")
    done = subprocess.run(["bash", str(EXTENSION / "ci.sh")], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ci.sh: ok" in done.stdout
    assert (EXTENSION / "k3lsp.vsix").stat().st_size > 10_000
