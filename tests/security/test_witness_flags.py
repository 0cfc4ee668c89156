"""A hostile compile_commands.json: the flags a repository gives its files must run nothing and leak nothing.

The repository's compile database names a compiler plugin (``-fplugin=``, ``-Xclang -load``: a shared object
whose constructor writes a marker when it is loaded), a directory of fake compiler programs (``-B``: a ``cc1``
that writes a marker), a specs file, a response file, and forced includes of a file outside the workspace
holding a secret. Each attack is first run with the flags as given (the control: it works, the marker appears
or the secret reaches the tool's output), then through the witnesses: no marker, no secret in any alert, and
none in the prompt the daemon is sent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from k3lsp.core.request import fields_for
from k3lsp.core.run import Target
from k3lsp.units.split import split
from k3lsp.wire.protocol import Priority
from k3lsp.witnesses import flags
from k3lsp.witnesses.analyze import analyze
from k3lsp.witnesses.shown import for_unit
from tests.witnesses.test_adapters import needs

SECRET = "hunter2-SECRET-TOKEN"
SOURCE = "#include <stdlib.h>\nint f(void)\n{\n\tchar *p = malloc(4);\n\tfree(p);\n\tfree(p);\n\treturn 0;\n}\n"


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(workspace, secret file outside it, marker dir): a workspace whose compile database is an attack."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: apt-get install gcc")
    root, outside, marks = tmp_path / "ws", tmp_path / "home", tmp_path / "marks"
    for d in (root, outside, marks, root / "evil"):
        d.mkdir()
    (outside / "id_rsa").write_text(f"{SECRET} here\n")
    plugin = root / "evil" / "plugin.so"
    c = root / "evil" / "plugin.c"
    c.write_text(
        "#include <stdio.h>\nint plugin_is_GPL_compatible;\n__attribute__((constructor)) static void run(void)\n"
        f'{{ FILE *f = fopen("{marks}/plugin", "w"); if (f) fclose(f); }}\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin), str(c)], check=True)
    cc1 = root / "evil" / "cc1"
    cc1.write_text(f"#!/bin/sh\ntouch {marks}/cc1\nexit 1\n")
    cc1.chmod(0o755)
    (root / "evil" / "x.specs").write_text(f"*cc1:\n+ -include {outside}/id_rsa\n")
    (root / "evil" / "more.rsp").write_text(f"-include {outside}/id_rsa\n")
    (root / "a.c").write_text(SOURCE)
    args = [
        "gcc", f"-fplugin={plugin}", "-Xclang", "-load", "-Xclang", str(plugin), "-B", str(root / "evil"),
        f"-specs={root}/evil/x.specs", f"@{root}/evil/more.rsp", "-include", f"{outside}/id_rsa",
        f"-I{outside}", "-DOK=1", "-c", "a.c", "-o", "/tmp/evil.o",
    ]  # fmt: skip
    (root / "compile_commands.json").write_text(
        json.dumps([{"directory": str(root), "file": "a.c", "arguments": args}])
    )
    return root, outside, marks


def test_the_attacks_work_when_the_flags_are_used_as_given(hostile):
    root, _, marks = hostile
    subprocess.run(["gcc", f"-fplugin={root}/evil/plugin.so", "-c", "a.c", "-o", "/dev/null"], cwd=root)
    subprocess.run(["gcc", "-B", str(root / "evil"), "-c", "a.c", "-o", "/dev/null"], cwd=root)
    assert (marks / "plugin").exists() and (marks / "cc1").exists()


def test_only_the_safe_flags_are_kept(hostile):
    root, outside, _ = hostile
    kept = flags.for_file(root / "a.c", root)
    assert kept is not None
    assert kept.gcc() == ["-DOK=1"]
    assert str(outside) not in " ".join(kept.gcc())
    assert any("-fplugin" in d for d in kept.dropped) and any(d.startswith("@") for d in kept.dropped)


@pytest.mark.parametrize("tool", ["gcc", "clang", "cppcheck", "sparse"])
def test_the_witnesses_run_nothing_and_leak_nothing(hostile, tool):
    root, _, marks = hostile
    needs(tool)
    report = analyze(root / "a.c", SOURCE, root, [tool])
    assert report.runs[0].problem is None
    assert not list(marks.iterdir())  # no plugin loaded, no fake cc1 run
    assert all(SECRET not in a.message for a in report.alerts)
    assert report.dropped_flags
    (unit,) = split(SOURCE)
    target = Target(root, "a.c", unit, alerts=for_unit(report.alerts, unit))
    request = json.dumps(fields_for(target, Priority.INTERACTIVE, "low", False, "medium"))
    assert SECRET not in request and "id_rsa" not in request and "evil" not in request


def test_an_include_path_through_a_symlink_out_of_the_workspace_is_dropped(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "out"
    root.mkdir(), outside.mkdir()
    (root / "link").symlink_to(outside)
    kept = flags.filtered(["-Ilink", "-include", "link/x.h", "-I", "inc", "-isystem", "/usr/include"], root, root)
    assert kept.includes == (("-I", str(root / "inc")), ("-isystem", "/usr/include"))
    assert kept.dropped == ("-I link", "-include link/x.h")
