"""backend/mlx_internals.py: each override of a private part of mlx or mlx-lm is used on the installed versions (the
ones it was written for), and on any other version the daemon takes mlx-lm's public path, with the same tokens on
the tiny checkpoint and one log line per override; pyproject.toml bounds mlx and mlx-lm below their next minor, the
installed versions lie inside the bounds, and the overrides know them."""

import ast
import logging
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mlx_lm.generate import BatchGenerator
from mlx_lm.models import gated_delta, kimi_k3
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from backend import decode, dist, kda, mlx_internals
from backend.engine import Engine, EngineArgs, GenRequest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
OTHER = {mlx_internals.MLX: "0.99.0", mlx_internals.MLX_LM: "0.99.1"}  # versions no override was written for


@pytest.fixture(scope="module")
def loaded(tiny_model):
    return dist.load_model(str(tiny_model), None, trust_remote_code=True)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test starts with no fallback told and leaves mlx-lm's KDA reading as it found it."""
    monkeypatch.setattr(mlx_internals, "_told", False)
    before = gated_delta.gated_delta_ops
    yield
    gated_delta.gated_delta_ops = before


def other_versions(monkeypatch) -> None:
    for name, version in OTHER.items():
        monkeypatch.setitem(mlx_internals.INSTALLED, name, version)


def answers(engine: Engine) -> list[list[int]]:
    """Greedy tokens of three requests decoding together, their prompts long enough to be read in several chunks
    through the KDA layers."""
    tok = engine.tokenizer
    prompts = [tok.encode(f"static int f{i}(int *p) {{ return p[{i}]; }}\n" * (6 + 5 * i)) for i in range(3)]
    for rid, prompt in enumerate(prompts):
        engine.submit(GenRequest(rid, prompt, [], 24, 0.0, 1.0, seed=rid))
    events = engine.run_until_idle(400)
    assert not engine.busy()
    ends = {e.rid: e for e in events if e.finish is not None}
    assert all(ends[rid].finish in ("length", "stop") for rid in range(3)), ends
    return [ends[rid].tokens for rid in range(3)]


def engine(tiny_model, loaded) -> Engine:
    return Engine(EngineArgs(model=str(tiny_model), trust_remote_code=True, prefill_step_size=64), *loaded)


def test_on_the_installed_versions_the_overrides_are_used(tiny_model, loaded, caplog):
    with caplog.at_level(logging.WARNING, logger=mlx_internals.__name__):
        e = engine(tiny_model, loaded)
    assert isinstance(e._gen, decode.Generator)
    assert gated_delta.gated_delta_ops is kda.chunked
    assert kimi_k3.scaled_dot_product_attention is decode.attention
    assert all(not o.mismatches() for o in mlx_internals.OVERRIDES)
    assert not caplog.records


def test_on_other_versions_mlx_lms_public_path_gives_the_same_tokens_and_says_so_once(
    tiny_model, loaded, caplog, monkeypatch
):
    overridden = answers(engine(tiny_model, loaded))
    other_versions(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=mlx_internals.__name__):
        first = engine(tiny_model, loaded)
        assert type(first._gen) is BatchGenerator
        assert gated_delta.gated_delta_ops is kda.TOKEN_LOOP
        assert answers(first) == overridden
        again = engine(tiny_model, loaded)  # a second engine (the daemon makes one per load): nothing more said
        assert type(again._gen) is BatchGenerator
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines  # one line, however many overrides and engines
    assert lines[0].startswith("mlx 0.99.0, mlx-lm 0.99.1: mlx-lm's public paths instead of ")
    for override in mlx_internals.OVERRIDES:  # every one that does not fit: here all of them
        assert f"{override.uses}, written for mlx" in lines[0] and f": {override.instead}" in lines[0]
    assert "mlx-lm 0.32.2" in lines[0]


def test_asked_for_mlx_lms_own_step_and_loop_nothing_is_said(tiny_model, loaded, caplog, monkeypatch):
    other_versions(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=mlx_internals.__name__):
        args = EngineArgs(model=str(tiny_model), trust_remote_code=True, eager_decode=True, sequential_kda=True)
        e = Engine(args, *loaded)
    assert type(e._gen) is BatchGenerator and gated_delta.gated_delta_ops is kda.TOKEN_LOOP
    assert not caplog.records  # no override was going to be used: no fallback to tell of


def test_doctor_is_told_the_versions_and_whether_the_overrides_fit_them(monkeypatch, caplog):
    installed = f"mlx {mlx_internals.INSTALLED['mlx']}, mlx-lm {mlx_internals.INSTALLED['mlx-lm']}"
    assert mlx_internals.report() == f"{installed}: the overrides fit"
    other_versions(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=mlx_internals.__name__):
        report = mlx_internals.report()
    assert report == "mlx 0.99.0, mlx-lm 0.99.1: 4 of 4 overrides off, mlx-lm's public paths (slower)"
    assert not caplog.records  # a report uses nothing: no fallback to tell of


def test_a_local_checkpoint_is_found_alike_on_other_versions(tiny_model, caplog, monkeypatch):
    assert mlx_internals.checkpoint_dir(str(tiny_model)) == tiny_model
    other_versions(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=mlx_internals.__name__):
        assert mlx_internals.checkpoint_dir(str(tiny_model)) == tiny_model
        assert mlx_internals.checkpoint_dir(tiny_model) == tiny_model
    assert len(caplog.records) == 1 and mlx_internals.DOWNLOAD.uses in caplog.records[0].getMessage()


LAUNCH = """
import select, sys
from backend import launcher, mlx_internals
from mlx._distributed_utils import launch
mlx_internals.INSTALLED["mlx"] = sys.argv[1]
sys.argv = ["k3-launch", "--help"]
try:
    launcher.main()
except SystemExit as exc:
    print("exit", exc.code)
ours, theirs = launch.select is launcher._select_reading, launch.select is select.select
print("select", "ours" if ours else "mlx's" if theirs else "?")
"""


@pytest.mark.parametrize(
    ("version", "select", "told"), [(mlx_internals.INSTALLED["mlx"], "ours", False), ("0.99.0", "mlx's", True)]
)
def test_k3_launch_replaces_select_on_the_versions_it_was_written_for_alone(version, select, told):
    run = subprocess.run(
        [sys.executable, "-c", LAUNCH, version], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert "usage:" in run.stdout and f"select {select}" in run.stdout, run.stdout + run.stderr
    assert "exit 0" in run.stdout
    assert (mlx_internals.LAUNCH_SELECT.uses in run.stderr) is told, run.stderr


def test_pyproject_bounds_mlx_and_mlx_lm_below_the_next_minor_around_the_versions_the_overrides_know():
    backend = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["backend"]
    requirements = [Requirement(line) for line in backend]
    for name in (mlx_internals.MLX, mlx_internals.MLX_LM):
        installed = Version(mlx_internals.INSTALLED[name])
        known = [versions for n, versions in (w for o in mlx_internals.OVERRIDES for w in o.written_for) if n == name]
        assert known and all(str(installed) in versions for versions in known), f"no override knows {name} {installed}"
        mine = [r for r in requirements if canonicalize_name(r.name) == name]
        assert mine, f"pyproject.toml's backend extra does not name {name}"
        for requirement in mine:
            uppers = [Version(s.version) for s in requirement.specifier if s.operator == "<"]
            assert uppers, f"{requirement} has no upper bound"
            assert all(u.release[:2] == (installed.major, installed.minor + 1) for u in uppers), requirement
            assert requirement.specifier.contains(installed), f"{name} {installed} is outside {requirement}"
            assert all(requirement.specifier.contains(v) for versions in known for v in versions)


def reaches_in(path: Path) -> list[str]:
    """What a module does to mlx's or mlx-lm's private parts: a private name imported, an attribute of an mlx or
    mlx-lm module replaced."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    theirs = {"mlx", "mlx_lm"}
    modules = set()  # the names mlx / mlx-lm modules are bound to here
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in theirs:
            names = [a.name for a in node.names]
            if any(part.startswith("_") for part in node.module.split(".") + names):
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(names)}")
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in theirs}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in modules
                ):
                    found.append(f"line {node.lineno}: {target.value.id}.{target.attr} replaced")
    return found


def test_only_mlx_internals_reaches_into_mlx_and_mlx_lm():
    root = Path(mlx_internals.__file__).parent
    others = {
        str(path.relative_to(root.parent)): found
        for path in sorted(root.rglob("*.py"))
        if path.name != "mlx_internals.py" and (found := reaches_in(path))
    }
    assert not others
    assert len(reaches_in(root / "mlx_internals.py")) >= 4  # the overrides are all here: the check sees them
