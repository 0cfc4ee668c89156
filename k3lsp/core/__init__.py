"""The audit core: what every front end shares below its own protocol (docs/architecture.md, "The layers").

A front end (the language server, the workspace audit, ``k3lsp audit``, ``k3lsp review``, ``k3lsp eval``) hands
the pool (``pool``) a list of targets, the units to audit and where they live (``run``), and reads one result per
unit and one summary. Below that line, decided once for all of them: what the cache answers and keeps
(``results``), which daemon takes which unit and when (``pool``: one queue, interactive first, fail-over), one
daemon's connection and state (``connection``, ``client``, ``replies``), one attempt at one unit (``request``),
the model's tool calls answered (``answers``), its verdicts folded in (``verdicts``), the settings every front end
reads (``options``), the changed-code scope (``scope``), and background tasks whose failures are seen (``tasks``).

It imports the parts below it (units, findings, tools, witnesses, git) and the contract (``k3lsp.wire``), never a
front end: the same settings give the same findings whichever front end asked.
"""
