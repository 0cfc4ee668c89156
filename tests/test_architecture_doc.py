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
- a name said to be a module's, ```Pool.audit` (`core/pool.py`)``: the module defines each of its parts;
- a test, ``lsp/test_units.py::test_name`` (under ``tests/``), or ``::test_name`` after one (the same file): the
  file exists and defines that function.
"""

import re
import tomllib
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
DEFINED_IN = re.compile(r"((?:`[A-Za-z_][\w.]*`,? )+)\(`([\w/]+\.py)`")
LAYER_ROW = re.compile(r"^\| [\w ]+ \| ((?:`\w+`(?:, )?)+) \|", re.MULTILINE)


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


def defines(path: Path, dotted: str) -> bool:
    """Whether a module defines each part of ``Pool.audit`` (a class, function, method or assigned name)."""
    source = path.read_text()
    return all(
        re.search(rf"^\s*(?:(?:async )?def |class ){part}\b|^\s*{part}\s*[:=]", source, re.MULTILINE)
        for part in dotted.split(".")
    )


def undefined(doc: str) -> list[str]:
    """Each name the doc says a module defines (```Pool.audit` (`core/pool.py`)``) that the module does not."""
    wrong: list[str] = []
    for number, line in enumerate(doc.splitlines(), start=1):
        for names, where in DEFINED_IN.findall(line):
            path = next((root / where for root in ROOTS if (root / where).is_file()), None)
            for name in re.findall(r"`([\w.]+)`", names):
                if path is not None and not name.startswith("k3lsp.") and not defines(path, name):
                    wrong.append(f"line {number}: `{name}` is not defined in {where}")
    return wrong


def broken_links(doc: str) -> list[str]:
    """Each relative Markdown link of the doc that leads to no file (docs/ is where the doc is)."""
    targets = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", doc)
    return [t for t in targets if not (DOC.parent / t).exists()]


def packages() -> list[str]:
    """k3lsp's packages, as the code map's headings name them (``k3lsp/core/``)."""
    return sorted(f"k3lsp/{p.parent.name}/" for p in (REPO / "k3lsp").glob("*/__init__.py"))


def doc_layers(doc: str) -> list[set[str]]:
    """The layers table of the doc, top to bottom: the packages of each layer."""
    table = doc[doc.index("## The layers") :].split("\n## ")[0]
    return [set(re.findall(r"`(\w+)`", packages)) for packages in LAYER_ROW.findall(table)]


def contract_layers(pyproject: dict) -> list[set[str]]:
    """The layers of import-linter's ``layers`` contract over ``k3lsp``, top to bottom (``a : b`` and ``a | b`` are
    one layer)."""
    (contract,) = [
        c
        for c in pyproject["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and c.get("containers") == ["k3lsp"]
    ]
    return [{name.strip() for name in re.split(r"[:|]", layer)} for layer in contract["layers"]]


def test_every_file_module_and_test_the_map_names_exists():
    doc = DOC.read_text()
    wrong = missing(doc) + undefined(doc) + [f"a link to {t}" for t in broken_links(doc)]
    assert not wrong, "docs/architecture.md names what is not in the tree:\n" + "\n".join(wrong)


def tabled(doc: str) -> dict[str, set[str]]:
    """The modules each section's table names in its first column, by the directory the section is about."""
    out: dict[str, set[str]] = {}
    for name in named(doc):
        if name.section is not None and name.text.endswith(".py") and "/" not in name.text:
            line = doc.splitlines()[name.line - 1]
            if line.startswith("| ") and f"`{name.text}`" in line.split(" | ")[0]:
                out.setdefault(str(name.section.relative_to(REPO)), set()).add(name.text)
    return out


def unmapped(doc: str) -> list[str]:
    """Each module of a package of k3lsp or of backend that no table of its section names."""
    table = tabled(doc)
    modules = [*(REPO / "k3lsp").glob("*/*.py"), *(REPO / "backend").rglob("*.py")]
    return sorted(
        str(m.relative_to(REPO))
        for m in modules
        if m.name != "__init__.py" and m.name not in table.get(str(m.parent.relative_to(REPO)), set())
    )


def test_every_module_has_its_row_in_its_packages_table():
    missing_rows = unmapped(DOC.read_text())
    assert not missing_rows, f"docs/architecture.md's code map has no row for {missing_rows}"


def test_every_package_of_k3lsp_has_its_section_in_the_code_map():
    headed = {f"{m}/".replace("//", "/") for m in HEADING.findall(DOC.read_text())}
    unmapped = [package for package in packages() if package not in headed]
    assert not unmapped, f"docs/architecture.md has no section for {unmapped}: add one to the code map"


def test_the_layers_table_is_the_layers_contract():
    layers = doc_layers(DOC.read_text())
    assert layers == contract_layers(tomllib.loads((REPO / "pyproject.toml").read_text())), (
        "docs/architecture.md's layers table and pyproject.toml's layers contract differ"
    )
    placed = set().union(*layers)
    unplaced = [p for p in packages() if p.removeprefix("k3lsp/").rstrip("/") not in placed]
    assert not unplaced, f"{unplaced} in no layer: add it to the layers contract and the doc's table"


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
    assert undefined("`Pool`, `Pool.audit` (`core/pool.py`), `Pool.nothing` (`core/pool.py`)") == [
        "line 1: `Pool.nothing` is not defined in core/pool.py"
    ]
    assert tabled("### `k3lsp/core/`: x\n\n| `pool.py`, `run.py` | owns `request.py` |\n")["k3lsp/core"] == {
        "pool.py",
        "run.py",
    }
    assert broken_links("[lsp.md](lsp.md), [x](nowhere.md#part), [y](https://example.org)") == ["nowhere.md"]


def test_layers_that_differ_are_caught():
    """The layers check itself: the doc's table read top to bottom, the contract's ``:`` and ``|`` as one layer."""
    doc = "## The layers\n\n| layer | packages |\n|---|---|\n| front | `lsp`, `cli` |\n| base | `wire` |\n\n## Next\n"
    contract = {"type": "layers", "containers": ["k3lsp"], "layers": ["lsp : cli", "wire"]}
    pyproject = {"tool": {"importlinter": {"contracts": [{"type": "forbidden"}, contract]}}}
    assert doc_layers(doc) == contract_layers(pyproject) == [{"lsp", "cli"}, {"wire"}]
    contract["layers"] = ["lsp | cli | review", "wire"]
    assert doc_layers(doc) != contract_layers(pyproject)
