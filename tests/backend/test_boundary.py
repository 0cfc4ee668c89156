"""The daemon loads only the contract package of k3lsp (``k3lsp.wire``), at run time as in its import graph.

import-linter (``lint-imports`` in .ci/run) holds the rule over the source; this test holds it over what a
started daemon really has in ``sys.modules``, imports made inside functions included.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_daemon_loads_only_the_contract_package_of_k3lsp():
    probe = (
        "import sys, backend.daemon, backend.serve, backend.store, backend.cli\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'k3lsp')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "k3lsp.wire.protocol" in loaded  # the probe did load the daemon
    assert [m for m in loaded if m != "k3lsp" and not m.startswith("k3lsp.wire")] == []
