"""The engine's one plug-in point (backend/hooks.py): scripted answers and failures reach the engine as its hooks, by
what each request is about, and no production module carries a test's wish (a forced answer, a fault, a script)."""

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

import backend
from backend import prefill
from backend.agent import Agent
from backend.daemon import Daemon
from backend.engine import Engine, EngineArgs, GenRequest
from backend.hooks import About
from backend.script import parse_script
from tests.support.engine import drain

PLUG_IN = {"backend.script", "backend.serve"}  # the hooks themselves, and the command that reads --script


def test_no_production_module_carries_a_tests_wish():
    assert not {"forced", "fault"} & {f.name for f in dataclasses.fields(GenRequest)}
    assert "fault" not in {f.name for f in dataclasses.fields(prefill.Reading)}
    assert "script" not in {f.name for f in dataclasses.fields(Agent)}
    assert "script" not in inspect.signature(Daemon).parameters
    root = Path(backend.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        module = ".".join(("backend", *path.relative_to(root).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "backend.script":
                importers.add(module)
    assert importers <= PLUG_IN, importers - PLUG_IN


@pytest.fixture(scope="module")
def scripted(tiny_model):
    script = parse_script(
        [
            {"unit": "bad", "turns": [{"fail": "injected by the script"}]},
            {"unit": "good", "turns": ["fine", "again"]},
            {"unit": "rules", "kind": "rule", "tries": 1, "turns": ["second try"]},
        ]
    )
    engine = Engine(EngineArgs(model=str(tiny_model), max_tokens=16, trust_remote_code=True), hooks=script)
    engine.warmup()  # requests about nothing: the model's own tokens, the script never asked
    return engine


def test_a_script_answers_and_fails_requests_by_what_they_are_about(scripted):
    prompt = scripted.tokenizer.encode("int f(char *p) { return p[0]; }")
    about = {
        1: About("good"),
        2: About("bad"),
        3: About("good", generation=1),
        4: About("good", generation=2),  # past the last turn: the model's own
        5: About("rules", kind="rule", tries=1),
        6: About("rules", kind="rule", tries=0),  # no entry answers a first try
        7: None,
    }
    for rid, what in about.items():
        scripted.submit(GenRequest(rid, prompt, [], 16, 0.0, 1.0, seed=rid, about=what))
    out = drain(scripted)
    assert out[2].finish == "error" and "injected by the script" in out[2].error.message
    assert [(out[r].finish, out[r].text) for r in (1, 3, 5)] == [
        ("stop", "fine"),
        ("stop", "again"),
        ("stop", "second try"),
    ]
    for rid in (4, 6, 7):
        assert out[rid].finish == "length" and len(out[rid].tokens) == 16  # greedy, the model's own: no stop forced
    assert scripted.outcome().failed.keys() == {2}
