"""The editor side's modules import in one direction: no import cycle anywhere in ``k3lsp``.

``workspace.py`` imported ``session.py`` (for its type) while ``session.py`` imported it: the workspace audit reached
into the session's client, pool, documents, splitter and republishing. lint-imports checks layers between packages,
not cycles inside one (``k3lsp.cli.batch`` and ``k3lsp.cli.findings_text`` imported each other too, until the report
model moved to ``k3lsp.findings.report``), so this test reads the import graph (grimp, import-linter's own; imports
under ``TYPE_CHECKING`` count) and names every cycle it finds.
"""

from __future__ import annotations

import grimp

PACKAGE = "k3lsp"


def cycles_through(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """For each module of ``package`` that imports a module importing it back (directly or not): that chain."""
    out = []
    for module in sorted(m for m in graph.modules if m == package or m.startswith(f"{package}.")):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                out.append([module, *back])
    return out


def test_no_import_cycle_in_the_editor_side():
    graph = grimp.build_graph("k3lsp")
    assert graph.find_modules_directly_imported_by(f"{PACKAGE}.lsp.session")  # the graph was read
    assert cycles_through(graph, PACKAGE) == []
