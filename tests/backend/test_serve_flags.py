"""`k3-backend serve`'s flags: the config dataclasses' settings come from their fields (one default each), and
every serve flag the docs name exists, with the default they give."""

import argparse
import re
from pathlib import Path

from backend import auth, serve
from backend.agent import AgentConfig
from backend.daemon import DaemonConfig
from backend.engine import EngineArgs
from backend.settings import from_args

ROOT = Path(__file__).parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "hostfiles" / "README.md"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    return p


def flags() -> dict[str, argparse.Action]:
    return {name: action for action in parser()._actions for name in action.option_strings}


def test_unset_flags_build_the_configs_defaults():
    args = parser().parse_args(["--model", "m"])
    assert from_args(AgentConfig, args, budgets=AgentConfig().budgets) == AgentConfig()
    assert from_args(auth.Security, args) == auth.Security()
    assert from_args(DaemonConfig, args, security=auth.Security()) == DaemonConfig()
    engine = from_args(EngineArgs, args, model="m")
    assert engine == EngineArgs(model="m")
    assert (DaemonConfig().slots, DaemonConfig().interactive_reserve) == (
        engine.max_concurrency,
        engine.interactive_reserve,
    )


def test_set_flags_reach_the_configs():
    args = parser().parse_args(
        [
            "--model",
            "m",
            "--max-concurrency",
            "3",
            "--temp",
            "0.5",
            "--thinking-effort",
            "high",
            "--server-key",
            "s.key_secret",
            "--tool-timeout",
            "7",
            "--max-tokens",
            "9",
        ]
    )
    agent = from_args(AgentConfig, args)
    assert (agent.temp, agent.thinking_effort, agent.max_tokens) == (0.5, "high", 9)
    assert from_args(EngineArgs, args, model="m").max_concurrency == 3
    assert from_args(auth.Security, args).server_secret == Path("s.key_secret")
    assert from_args(DaemonConfig, args).tool_timeout == 7.0


def documented() -> dict[str, set[str]]:
    """Every flag the docs give a `k3-backend serve` command line or a `serve --flag` mention, and where."""
    found: dict[str, set[str]] = {}
    for doc in DOCS:
        text = re.sub(r"\\\n\s*", " ", doc.read_text())  # a shell command continued over lines is one line
        for mention in re.finditer(r"(?:k3-backend serve|`serve)\b([^`\n]*)", text):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", mention.group(1)):
                found.setdefault(flag, set()).add(doc.name)
    return found


def test_every_documented_serve_flag_exists():
    documented_flags = documented()
    assert {"--bind", "--load-wait", "--server-key", "--max-concurrency"} <= set(documented_flags)  # the docs were read
    unknown = {flag: docs for flag, docs in documented_flags.items() if flag not in flags()}
    assert not unknown


def test_documented_defaults_are_the_flags_defaults():
    """ "(`serve --max-concurrency`, 8)", "`serve --prompt-cache-size` entries (16)" anywhere; "`--x` (default N)"
    in the daemon's own pages, where a bare flag is serve's."""
    given = []
    for doc in DOCS:
        text = doc.read_text()
        given += re.findall(r"`(?:k3-backend )?serve (--[a-z-]+)`(?:, | \w+ \()`?([\w.]+)`?\)", text)
        if doc.name in ("engine.md", "protocol.md"):
            given += re.findall(r"`(--[a-z-]+)` \(default `?([\w.]+)`?\)", text)
    assert len(given) >= 5  # the docs were read
    known = flags()
    for flag, value in given:
        default = known[flag].default
        assert (float(value) == default) if isinstance(default, int | float) else value == default, flag
