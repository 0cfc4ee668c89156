"""The editor side must install and run without mlx: no k3lsp module may import it, even indirectly."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import k3lsp

REPO = Path(__file__).resolve().parents[2]


def test_no_k3lsp_module_imports_mlx():
    modules = [m.name for m in pkgutil.walk_packages(k3lsp.__path__, "k3lsp.") if m.name != "k3lsp.__main__"]
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm', 'transformers', 'backend'))\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(modules) > 10
    assert done.stdout.strip() == ""


def test_the_distribution_declares_no_mlx_without_extras():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith(("mlx", "transformers", "tokenizers"))]
    assert any(d.startswith("mlx-lm") for d in project["optional-dependencies"]["backend"])
