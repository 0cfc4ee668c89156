"""The language server: LSP in, diagnostics, hovers and code actions out (docs/lsp.md).

``server`` holds the pygls handlers only, each one line into ``session``, which keeps the settings and the
documents and runs each audit through the core (``k3lsp.core``); ``documents`` holds one file's results and what
is shown for its current text; ``progress`` paces ``$/progress`` and refreshes; ``diffing`` moves diagnostics with
the edits between saves; ``actions`` offers the code actions; ``workspace`` is ``k3lsp.auditWorkspace``. A front
end: LSP types stay in this package; the core below it never sees them.
"""
