"""docs/protocol.md and k3lsp/wire/protocol.py must describe the same protocol: same kinds, same fields."""

import re
from pathlib import Path

import pytest

from k3lsp.wire import protocol

DOC = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()


def doc_sections() -> dict[str, dict[str, set[str]]]:
    """direction -> kind -> documented field names, read from the '## Client → daemon' / '## Daemon → client' parts."""
    parts = {
        "to_daemon": DOC.split("## Client → daemon")[1].split("## Daemon → client")[0],
        "to_client": DOC.split("## Daemon → client")[1].split("## The finding")[0],
    }
    out: dict[str, dict[str, set[str]]] = {}
    for direction, text in parts.items():
        kinds = re.split(r"^### `(\w+)`\s*$", text, flags=re.M)[1:]
        out[direction] = {
            kind: set(re.findall(r"^\| `(\w+)` \|", body, flags=re.M))
            for kind, body in zip(kinds[::2], kinds[1::2], strict=True)
        }
    return out


@pytest.mark.parametrize("direction", ["to_daemon", "to_client"])
def test_every_documented_kind_has_a_validator_and_back(direction):
    documented = doc_sections()[direction]
    assert set(documented) == set(protocol.SCHEMAS[direction])


@pytest.mark.parametrize("direction", ["to_daemon", "to_client"])
def test_documented_fields_match_the_schemas(direction):
    for kind, fields in doc_sections()[direction].items():
        assert fields == set(protocol.SCHEMAS[direction][kind]), kind


def test_finding_fields_are_documented():
    table = DOC.split("## The finding")[1].split("\n## ")[0]
    documented = set(
        re.findall(r"`(\w+)`", "\n".join(line.split("|")[1] for line in table.splitlines() if line.startswith("| `")))
    )
    assert documented == set(protocol.FINDING_SCHEMA)


def test_every_error_code_is_documented_with_its_kind():
    table = DOC.split("| code | kind | sent by | meaning |")[1].split("\n\n")[0]
    documented = dict(re.findall(r"^\| `(\w+)` \| ([a-z-]+) \|", table, flags=re.M))
    assert documented == {code.value: code.kind.value for code in protocol.ErrorCode}


def test_the_editor_state_of_each_code_is_documented():
    table = DOC.split("| state | codes |")[1].split("\n\n")[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", table, flags=re.M))
    assert rows.pop("down") == "every other code"
    documented = {state: set(re.findall(r"`(\w+)`", codes)) for state, codes in rows.items()}
    states = {code.state for code in protocol.ErrorCode} - {"down"}
    assert documented == {state: {c.value for c in protocol.ErrorCode if c.state == state} for state in states}


def test_progress_stages_are_documented():
    row = next(line for line in DOC.splitlines() if line.startswith("| `stage` |"))
    assert re.findall(r"`(\w+)` \(", row) == list(protocol.PROGRESS_STAGES)
