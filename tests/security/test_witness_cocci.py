"""Coccinelle as a witness on a hostile repository (issue 38, 10b): nothing of the repository reaches spatch but
the text of the file it analyzes.

spatch is a witness (``k3lsp.witnesses.adapters``): ``spatch -D report --no-includes`` with the semantic
patches k3lsp ships. A repository has three ways to make spatch do more. A ``.cocciconfig`` in the folder
spatch runs in adds options: ``--python PROG`` makes it start PROG (as the Python of its scripts), and
``--parse-handler`` would load OCaml code. A ``.cocci`` file is a program: an ``@initialize:python@`` rule
runs Python. And its compile database can ask for ``--include-headers``, ``--sp-file`` or ``-I`` of a folder
outside. Each is first shown to work when spatch runs in the workspace as a user would (the control: a marker
appears), then through the witnesses: no marker, and still the alert of k3lsp's own patch.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from k3lsp.witnesses.adapters import ADAPTERS, COCCI_DIR
from k3lsp.witnesses.analyze import analyze, find
from k3lsp.witnesses.flags import for_file
from tests.witnesses.test_adapters import DOUBLE_FREE, needs


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(workspace, folder outside it, marker folder): a workspace whose spatch settings are attacks."""
    needs("coccinelle")
    root, outside, marks = tmp_path / "ws", tmp_path / "home", tmp_path / "marks"
    for d in (root, outside, marks):
        d.mkdir()
    python = root / "python.sh"
    python.write_text(f'#!/bin/sh\ntouch {marks}/cocciconfig\nexec python3 "$@"\n')
    python.chmod(0o755)
    (root / ".cocciconfig").write_text(f"[spatch]\noptions = --python {python}\n")
    (root / "evil.cocci").write_text(
        f'@r@\nexpression E;\n@@\nfree(E);\n\n@script:python@\ne << r.E;\n@@\nopen("{marks}/cocci", "w").close()\n'
    )
    (root / "a.c").write_text(DOUBLE_FREE)
    args = ["gcc", "--sp-file", "evil.cocci", "--include-headers", "--python", str(python), f"-I{outside}", "-c", "a.c"]
    (root / "compile_commands.json").write_text(
        json.dumps([{"directory": str(root), "file": "a.c", "arguments": args}])
    )
    return root, outside, marks


def test_the_repository_runs_code_when_spatch_runs_in_it(hostile):
    root, _, marks = hostile
    spatch, ours = find("coccinelle").executable, str(COCCI_DIR / "double-free.cocci")
    subprocess.run([spatch, "--sp-file", ours, "-D", "report", "--no-includes", "a.c"], cwd=root, timeout=60)
    subprocess.run([spatch, "--sp-file", "evil.cocci", "a.c"], cwd=root, timeout=60)
    assert (marks / "cocciconfig").exists() and (marks / "cocci").exists()


def test_spatch_as_a_witness_runs_only_k3lsps_patches_and_reads_no_header(hostile):
    root, outside, marks = hostile
    report = analyze(root / "a.c", DOUBLE_FREE, root, ["coccinelle"])
    assert report.runs[0].problem is None and not list(marks.iterdir())
    assert [a.rule for a in report.alerts] == ["coccinelle.double-free"]
    kept = for_file(root / "a.c", root)
    assert kept is not None and any("--include-headers" in d for d in kept.dropped)
    for argv in ADAPTERS["coccinelle"].commands("spatch", root / "a.c", kept):
        patches = [Path(argv[i + 1]).parent for i, a in enumerate(argv) if a == "--sp-file"]
        assert patches == [COCCI_DIR] and "--no-includes" in argv and "--include-headers" not in argv
        assert not [a for a in argv if "evil" in a or "python" in a or str(outside) in a]
