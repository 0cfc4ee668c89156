"""Script files for `k3-backend serve --script`: matching, and clear errors for malformed files."""

import json
import subprocess
import sys

import pytest

from backend.script import Repeat, ScriptError, load_script, parse_script


def test_first_matching_entry_wins_and_turns_run_out():
    script = parse_script(
        [
            {"unit": "f", "turns": ["a", {"repeat": "x", "tokens": 5}]},
            {"unit": "*", "turns": ["any"]},
            {"unit": "g", "turns": ["never reached"]},
        ]
    )
    assert script.turn("f", 0) == "a" and script.turn("f", 1) == Repeat("x", 5)
    assert script.turn("f", 2) is None  # past the last turn: the model's own output
    assert script.turn("g", 0) == "any" and script.turn("g", 1) is None


@pytest.mark.parametrize(
    "data, where",
    [
        ({"unit": "f"}, "JSON list"),
        (["f"], "script[0]"),
        ([{"unit": "f", "turns": "a"}], "script[0]"),
        ([{"unit": "f", "turns": [""]}], "script[0].turns[0]"),
        ([{"unit": "f", "turns": [{"repeat": "x", "tokens": 0}]}], "script[0].turns[0]"),
        ([{"unit": "f", "turns": [{"repeat": "x", "tokens": True}]}], "script[0].turns[0]"),
        ([{"unit": "f", "turns": [{"repeat": "", "tokens": 3}]}], "script[0].turns[0]"),
    ],
)
def test_malformed_scripts_say_where(data, where):
    with pytest.raises(ScriptError, match=where.replace("[", r"\[").replace("]", r"\]")):
        parse_script(data)


def test_unreadable_file(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("[{")
    with pytest.raises(ScriptError, match="cannot read script"):
        load_script(bad)
    with pytest.raises(ScriptError, match="cannot read script"):
        load_script(tmp_path / "missing.json")


def test_serve_refuses_a_bad_script_before_loading(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps([{"unit": 1, "turns": []}]))
    proc = subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", "--model", str(tmp_path / "nothing"), "--script", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "script[0]" in proc.stderr and proc.stdout == ""
