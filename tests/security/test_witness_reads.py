"""A hostile source: what it includes from outside the workspace must never come back in an alert (issue 38, 4).

No compile flag is needed: the source itself says ``#include "/home/me/secret"``, or reaches out with ``..``,
through a symlink in the workspace, through a header of the workspace, with a path a macro spells, or asks an
assembler for ``.incbin``. The files outside hold a secret string and a secret number where the analyzers
quote them: a static assertion's message (sparse) and an array index (cppcheck). Each way is first shown to
work with the analyzer run as the repository would run it (the control: the secret is in its output), then
through the witnesses: the secret is in no alert, no diagnostic and no audit request, and the alert that only
names the file it could not read is left out and counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from k3lsp.core.request import fields_for
from k3lsp.core.run import Target
from k3lsp.lsp.convert import alert_diagnostic
from k3lsp.units.split import split
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import Priority
from k3lsp.witnesses import confine
from k3lsp.witnesses.analyze import UNCONFINED, analyze, available, find
from k3lsp.witnesses.child import LAUNCHER, Limits, run
from k3lsp.witnesses.outside import names_outside
from k3lsp.witnesses.shown import for_unit
from tests.witnesses.test_adapters import confinable, needs

SECRET, PIN = "hunter2-SECRET-TOKEN", "73133771"
TOOLS = ["cppcheck", "sparse", "clang", "gcc", "coccinelle"]


def body(token: str, pin: str, include: str = "#include") -> str:
    """A function quoting ``token`` (a file holding a string literal) in a static assertion and ``pin`` (a
    number) as an index, and asking the assembler for the token's file."""
    incbin = f'\tasm(".incbin \\"{token.strip(chr(34))}\\"");\n' if token.startswith('"') else ""
    return (
        f"_Static_assert(0,\n{include} {token}\n);\n"
        f"int f(int n)\n{{\n\tchar b[4];\n\tb[\n{include} {pin}\n\t] = 0;\n{incbin}\treturn b[n];\n}}\n"
    )


def ways(home: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """Each way in: the analyzed file's text, and the workspace files it needs (path -> text)."""
    return {
        "absolute": (body(f'"{home}/token.txt"', f'"{home}/pin.txt"'), {}),
        "dotdot": (body('"../home/token.txt"', '"../home/pin.txt"'), {}),
        "symlink": (body('"link/token.txt"', '"link/pin.txt"'), {}),
        "include_next": (body(f'"{home}/token.txt"', f'"{home}/pin.txt"', "#include_next"), {}),
        "macro": (f'#define T "{home}/token.txt"\n#define P "{home}/pin.txt"\n' + body("T", "P"), {}),
        "header": (
            '#include "inc.h"\nint f(int n)\n{\n\tchar b[4];\n\tb[PIN] = 0;\n\treturn b[n];\n}\n',
            {
                "inc.h": f'_Static_assert(0,\n#include "{home}/token.txt"\n);\n'
                f'enum {{ PIN =\n#include "{home}/pin.txt"\n}};\n'
            },
        ),
    }


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, a folder beside it holding the secrets), a symlink in the workspace pointing there."""
    root, home = tmp_path / "ws", tmp_path / "home"
    root.mkdir(), home.mkdir()
    (home / "token.txt").write_text(f'"{SECRET}"\n')
    (home / "pin.txt").write_text(f"{PIN}\n")
    (root / "link").symlink_to(home)
    return root, home


def workspace(places: tuple[Path, Path], way: str) -> tuple[Path, str]:
    root, home = places
    text, files = ways(home)[way]
    for name, content in files.items():
        (root / name).write_text(content)
    (root / "a.c").write_text(text)
    return root, text


@pytest.mark.parametrize(
    ("tool", "argv"), [("sparse", ["sparse", "a.c"]), ("cppcheck", ["cppcheck", "--enable=all", "-q", "a.c"])]
)
def test_the_secrets_reach_the_analyzer_output_when_it_reads_freely(places, tool, argv):
    needs(tool, confined=False)
    root, _ = workspace(places, "absolute")
    out = subprocess.run([find(tool).executable, *argv[1:]], cwd=root, capture_output=True, text=True, timeout=60)
    assert (SECRET if tool == "sparse" else PIN) in out.stdout + out.stderr


@pytest.mark.parametrize("way", sorted(ways(Path("/"))))
@pytest.mark.parametrize("tool", TOOLS)
def test_no_secret_from_outside_reaches_an_alert_a_diagnostic_or_the_prompt(places, tool, way):
    needs(tool)
    root, text = workspace(places, way)
    report = analyze(root / "a.c", text, root, [tool])
    (ran,) = report.runs
    assert ran.problem is None
    shown = " ".join(a.message for a in ran.alerts)
    assert SECRET not in shown and PIN not in shown, ran.alerts
    for unit in split(text):
        alerts = for_unit(report.alerts, unit)
        fields = fields_for(Target(root, "a.c", unit, alerts=alerts), Priority.INTERACTIVE, "low", False)
        diagnostics = " ".join(alert_diagnostic(a, unit, "warning").message for a in alerts)
        sent = json.dumps(fields) + diagnostics
        assert SECRET not in sent and PIN not in sent
        assert "token.txt" not in json.dumps(fields.get("alerts", [])) + diagnostics  # the code names it; no alert


def test_an_alert_naming_the_file_it_could_not_read_is_left_out_and_counted(places, tmp_path):
    needs("sparse")
    root, text = workspace(places, "absolute")
    cache = ResultCache(tmp_path / "cache.sqlite3")
    first = analyze(root / "a.c", text, root, ["sparse"], cache)
    again = analyze(root / "a.c", text, root, ["sparse"], cache)
    assert first.outside >= 1 and not [a for a in first.alerts if "token.txt" in a.message], first.alerts
    assert again.runs[0].cached and again.outside == first.outside


def test_a_path_in_a_message_is_outside_unless_it_resolves_into_the_workspace_or_the_system(tmp_path):
    root, folder = tmp_path / "ws", tmp_path / "ws" / "drivers"
    folder.mkdir(parents=True)
    inside = (root,)
    assert not names_outside("Array 'b[4]' accessed at index 9, which is out of bounds.", folder, inside)
    assert not names_outside("unable to open '../include/x.h'", folder, inside)
    assert not names_outside("in /usr/include/stdio.h: a/b is n/2", folder, inside)
    assert not names_outside("see https://cwe.mitre.org/data/definitions/476.html", folder, inside)
    assert names_outside("unable to open '../../secret'", folder, inside)
    assert names_outside(f"unable to open '{tmp_path}/home/id_rsa'", folder, inside)
    assert names_outside("cannot open file '~/.netrc'", folder, inside)


def test_a_confined_child_reads_the_workspace_and_nothing_beside_it(places, tmp_path):
    confinable()
    root, home = places
    (root / "mine.txt").write_text("ours\n")
    work = tmp_path / "work"
    work.mkdir()
    cat = ["/bin/cat", str(root / "mine.txt"), str(home / "pin.txt")]
    free, confined = run(cat, str(work), Limits(seconds=10)), run(cat, str(work), Limits(seconds=10), (root,))
    assert PIN in free.stdout and "ours" in confined.stdout
    assert PIN not in confined.stdout and "Permission denied" in confined.stderr


def test_without_landlock_the_witnesses_do_not_run(places, monkeypatch):
    needs("cppcheck", confined=False)
    root, text = workspace(places, "absolute")
    monkeypatch.setattr(confine, "abi", lambda: 0)
    (ran,) = analyze(root / "a.c", text, root, ["cppcheck"]).runs
    assert ran.problem == UNCONFINED and ran.alerts == ()
    assert available()["cppcheck"].endswith(UNCONFINED)  # what `k3lsp witnesses` and the status say


def test_a_tool_installed_in_the_home_folder_opens_only_its_own_folder_there(tmp_path, monkeypatch):
    home = tmp_path / "me"
    (home / ".local" / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    granted = [path for path, _ in confine.grants(str(tmp_path / "work"), (), str(home / ".local/bin/cppcheck"))]
    assert str(home / ".local" / "bin") in granted
    assert not [p for p in granted if Path(p) in (home, home / ".local")]


def test_a_launcher_the_kernel_refuses_to_confine_starts_nothing(tmp_path):
    confinable()
    marker = tmp_path / "ran"
    spec = json.dumps({"limits": [2**31, 10, 2**20], "grants": [[str(tmp_path), 0]]})  # no right: refused
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), spec, "/usr/bin/touch", str(marker)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == confine.REFUSED and not marker.exists()
    assert "could not be confined" in out.stderr
