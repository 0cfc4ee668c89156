"""README.md and docs/lsp.md list the server's settings with the defaults the code has (k3lsp/core/options.py)."""

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from k3lsp.core import options
from k3lsp.units import kernelc

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = {f.name: f.default for f in fields(options.Options)}


def documented(doc: str) -> dict[str, str]:
    """key -> default cell of the table whose header is | key | default | meaning |."""
    table = (REPO / doc).read_text().split("| key | default | meaning |")[1].split("\n\n")[0]
    return dict(re.findall(r"^\| `(\w+)` \| ([^|]*) \|", table, flags=re.M))


def rows(doc: str) -> dict[str, str]:
    """key -> its whole row of that table."""
    table = (REPO / doc).read_text().split("| key | default | meaning |")[1].split("\n\n")[0]
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", table, flags=re.M)}


def shown(value) -> str:
    return f"`{json.dumps(list(value))}`" if isinstance(value, tuple) else f"`{json.dumps(value).strip(chr(34))}`"


@pytest.mark.parametrize("doc", ["README.md", "docs/lsp.md"])
def test_every_setting_is_documented_with_its_default(doc):
    table = documented(doc)
    assert list(table) == [s.key for s in options.SETTINGS]  # every key, in the schema's order
    for setting in options.SETTINGS:
        key, default = setting.key, DEFAULTS[setting.field]
        if key == "endpoint" or default == "":  # computed per user / no value: said in words
            continue
        cell = table[key].strip()
        if isinstance(default, kernelc.Macros):  # the built-in table, nothing added: the setting adds to it
            assert default == kernelc.DEFAULT_MACROS and cell == "`{}`"
            continue
        assert cell in (shown(default), str(default)), (key, cell, default)


def test_readme_names_every_allowed_value():
    table = rows("README.md")
    for setting in options.SETTINGS:
        missing = [c for c in setting.choices if f"`{c}`" not in table[setting.key]]
        assert not missing, f"README.md's row of {setting.key} does not name {missing}"
