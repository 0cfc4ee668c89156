"""What an agent is given beside findings is sanitised as every front end prints it: an error or warning quoting a
daemon or a file of the tree carries no link and no control character into the agent's context."""

from __future__ import annotations

from k3lsp.mcp import results


def test_errors_and_warnings_lose_link_syntax_and_control_characters():
    given = results.result(
        errors=["failed: see [the fix](https://evil.example)\x1b]0;x\x07"], warnings=["<https://e.x>"]
    )
    assert given["errors"] == ["failed: see [the fix] (https://evil.example)]0;x"]
    assert given["warnings"] == ["< https://e.x>"]
    assert given["untrusted"] == results.UNTRUSTED
