"""docs/agents.md's set-up snippets are what each agent reads: each JSON or TOML block parses, and the `k3lsp`
server it declares is a command line `k3lsp` accepts (a snippet that rots fails here, not in a user's agent)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from k3lsp.cli.main import build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
BLOCK = re.compile(r"```(json|toml)\n(.*?)```", re.S)


def servers() -> dict[str, dict]:
    """Each snippet's k3lsp server entry, by the agent whose heading comes before it."""
    text = DOC.read_text()
    found = {}
    for match in BLOCK.finditer(text):
        kind, body = match.groups()
        agent = re.findall(r"\*\*([^*]+)\*\*", text[: match.start()])[-1]
        config = json.loads(body) if kind == "json" else tomllib.loads(body)
        entries = config.get("mcpServers") or config.get("servers") or config.get("mcp_servers")
        found[agent] = entries["k3lsp"]
    return found


def test_every_agents_snippet_starts_k3lsp_mcp_with_arguments_it_accepts():
    found = servers()
    assert set(found) == {"Claude Code", "Codex CLI", "VS Code", "Neovim"}
    for agent, server in found.items():
        assert server["command"] == "k3lsp", agent
        args = build_parser().parse_args(server["args"])
        assert args.command == "mcp" and args.root is not None, agent
