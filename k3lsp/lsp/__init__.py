"""The language server: LSP in, diagnostics, hovers and code actions out (docs/lsp.md).

``server`` holds the pygls handlers only, each one line into ``session``, which keeps the settings and the
documents and hands each audit to the audit service (``k3lsp.core.service``), listening to its events;
``documents`` holds one file's results and what is shown for its current text; ``convert`` is the edge where the
project's own positions, ranges and findings become LSP types; ``progress`` paces ``$/progress`` and refreshes;
``diffing`` moves diagnostics with the edits between saves; ``actions`` offers the code actions; ``workspace`` is
``k3lsp.auditWorkspace`` and ``variants`` the Find variants command. A front end: LSP types stay in this package;
nothing below it imports ``lsprotocol`` or ``pygls`` (import-linter holds it).
"""
