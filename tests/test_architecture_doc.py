"""docs/architecture.md is the code map: every file, module and test it names exists, and every package of k3lsp has
its place in it. Modules move (issue 40 grouped k3lsp's flat modules into packages); a map that still names the old
places sends the next reader to files that are not there, so this test fails the moment the map and the tree part.

How the doc names things, and how each is resolved here:

- a path in backticks, ``core/pool.py`` or ``k3lsp/core/pool.py`` or ``backend/daemon.py``: relative to the directory
  its section is about, the repository, ``k3lsp/``, ``backend/`` or ``tests/`` (a name that ends in ``/`` is a
  directory);
- a bare file name, ``daemon.py``: in the table or paragraph of the section whose heading names a directory
  (``### `k3lsp/core/` ...``), else in ``backend/`` (the daemon's package is flat);
- a dotted module, ``k3lsp.core.pool``: a module or package of the tree;
- a relative Markdown link, ``[lsp.md](lsp.md)``: a file beside the doc;
- a test, ``lsp/test_units.py::test_name`` (under ``tests/``), or ``::test_name`` after one (the same file): the
  file exists and defines that function.
"""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
ROOTS = (REPO, REPO / "k3lsp", REPO / "backend", REPO / "tests")

CODE = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#{2,4} .*?`((?:k3lsp|backend)/[\w/]*)`", re.MULTILINE)
FILE = re.compile(r"^[\w./-]+\.(?:py|toml|md|cfg|ts|lua|json|cocci)/?$|^[\w./-]+/$")
DOTTED = re.compile(r"^(?:k3lsp|backend)(?:\.[a-z_0-9]+)*$")
TEST = re.compile(r"^(?:(?P<file>[\w/]+\.py))?::(?P<name>test_\w+)$")
LAYER_ROW = re.compile(r"^\| `k3lsp/(\w+)/` \| ([^|]*) \|", re.MULTILINE)
PARTS = {"units", "findings", "tools", "witnesses", "git"}


@dataclass(frozen=True)
class Named:
    """One name the doc gives: the text in backticks, its line, and the directory its section is about."""

    text: str
    line: int
    section: Path | None


def named(doc: str) -> list[Named]:
    """Every name in backticks, with the directory named by the heading of the section it is in."""
    names: list[Named] = []
    section: Path | None = None
    for number, line in enumerate(doc.splitlines(), start=1):
        if line.startswith("#"):
            heading = HEADING.match(line)
            section = REPO / heading.group(1) if heading else None
        names += [Named(text, number, section) for text in CODE.findall(line)]
    return names


def resolves(name: Named) -> bool:
    """Whether a file or directory name is one of the tree's, by the rules of the module docstring."""
    text = name.text.rstrip("/")
    here = [name.section / text] if name.section else []
    if "/" not in name.text:
        return any(place.exists() for place in [*here, REPO / "backend" / text, REPO / text])
    return any(place.exists() for place in [*here, *(root / text for root in ROOTS)])


def module_exists(dotted: str) -> bool:
    """Whether ``k3lsp.core.pool`` (a module) or ``k3lsp.core`` (a package) is in the tree."""
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def missing(doc: str) -> list[str]:
    """Each name of the doc that names nothing in the tree, said with its line."""
    wrong: list[str] = []
    test_file: Path | None = None
    for name in named(doc):
        text = name.text
        if test := TEST.match(text):
            if test.group("file"):
                test_file = REPO / "tests" / test.group("file")
            if test_file is None or not test_file.is_file():
                wrong.append(f"line {name.line}: `{text}`: no test file {test_file}")
            elif not re.search(rf"^\s*(?:async )?def {test.group('name')}\(", test_file.read_text(), re.MULTILINE):
                wrong.append(f"line {name.line}: `{text}`: {test_file.relative_to(REPO)} has no {test.group('name')}")
        elif FILE.match(text):
            if text.startswith("tests/") or re.match(r"^[\w/]+/test_\w+\.py$", text):
                test_file = REPO / "tests" / text.removeprefix("tests/")
            if not resolves(name):
                wrong.append(f"line {name.line}: `{text}` is no file or directory of the tree")
        elif DOTTED.match(text) and not module_exists(text):
            wrong.append(f"line {name.line}: `{text}` is no module of the tree")
    return wrong


def broken_links(doc: str) -> list[str]:
    """Each relative Markdown link of the doc that leads to no file (docs/ is where the doc is)."""
    targets = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", doc)
    return [t for t in targets if not (DOC.parent / t).exists()]


def packages() -> list[str]:
    """k3lsp's packages, as the code map's headings name them (``k3lsp/core/``)."""
    return sorted(f"k3lsp/{p.parent.name}/" for p in (REPO / "k3lsp").glob("*/__init__.py"))


def allowed(doc: str) -> dict[str, set[str]]:
    """The layers table of the doc: each package and the packages it may import (``the parts`` and ``everything``
    spelled out)."""
    rows = {package: cell for package, cell in LAYER_ROW.findall(doc)}
    out: dict[str, set[str]] = {}
    for package, cell in rows.items():
        names = set(re.findall(r"`(\w+)`", cell)) | (PARTS if "the parts" in cell else set())
        out[package] = {p.split("/")[1] for p in packages()} if "everything" in cell else names
    return out


def imported(package: str) -> dict[str, str]:
    """The other packages of k3lsp that a package's modules import, each with one module that does."""
    out: dict[str, str] = {}
    for path in sorted((REPO / "k3lsp" / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                inside = parts[0] == "k3lsp" and len(parts) > 1 and parts[1] != package
                if inside and (REPO / "k3lsp" / parts[1] / "__init__.py").exists():
                    out.setdefault(parts[1], str(path.relative_to(REPO)))
    return out


def beyond(doc: str) -> list[str]:
    """Each import from one package of k3lsp into another that the doc's layers table does not allow."""
    table = allowed(doc)
    return [
        f"{where} imports k3lsp.{other}: the layers table lets `k3lsp/{package}/` import only {sorted(table[package])}"
        for package in sorted(table)
        for other, where in imported(package).items()
        if other not in table[package]
    ]


def test_every_file_module_and_test_the_map_names_exists():
    wrong = missing(DOC.read_text()) + [f"a link to {t}" for t in broken_links(DOC.read_text())]
    assert not wrong, "docs/architecture.md names what is not in the tree:\n" + "\n".join(wrong)


def test_every_package_of_k3lsp_has_its_section_in_the_code_map():
    headed = {f"{m}/".replace("//", "/") for m in HEADING.findall(DOC.read_text())}
    unmapped = [package for package in packages() if package not in headed]
    assert not unmapped, f"docs/architecture.md has no section for {unmapped}: add one to the code map"


def test_the_layers_table_allows_every_import_between_packages():
    table = allowed(DOC.read_text())
    assert set(table) == {p.removeprefix("k3lsp/").rstrip("/") for p in packages()}, "a package without its row"
    wrong = beyond(DOC.read_text())
    assert not wrong, "docs/architecture.md's layers table and the imports disagree:\n" + "\n".join(wrong)


def test_a_name_that_moved_is_caught():
    """The checks themselves: a module at its old place, a test that is not there, a package left out."""
    doc = (
        "### `k3lsp/core/`: the core\n\n| `pool.py` | `units.py` |\n\n"
        "`session.py` `k3lsp/core/pool.py` `k3lsp.core.pool` `k3lsp.pool`\n"
        "`lsp/test_units.py::test_every_function_line_belongs_to_exactly_one_unit`, `::test_no_such_test`\n"
    )
    assert missing(doc) == [
        "line 3: `units.py` is no file or directory of the tree",
        "line 5: `session.py` is no file or directory of the tree",
        "line 5: `k3lsp.pool` is no module of the tree",
        "line 6: `::test_no_such_test`: tests/lsp/test_units.py has no test_no_such_test",
    ]
    assert "k3lsp/core/" in packages() and "k3lsp/wire/" in packages()
    assert broken_links("[lsp.md](lsp.md), [x](nowhere.md#part), [y](https://example.org)") == ["nowhere.md"]


def test_an_import_the_layers_table_does_not_allow_is_caught():
    """The layers check itself: a table that lets ``units`` import nothing catches its import of ``wire``."""
    table = "| `k3lsp/units/` | nothing | |\n| `k3lsp/core/` | the parts, `wire` | |\n| `k3lsp/cli/` | everything | |\n"
    assert allowed(table)["units"] == set() and allowed(table)["core"] == PARTS | {"wire"}
    assert {"lsp", "review", "eval", "wire"} <= allowed(table)["cli"]
    assert [line.split(":")[0] for line in beyond(table)] == ["k3lsp/units/split.py imports k3lsp.wire"]
