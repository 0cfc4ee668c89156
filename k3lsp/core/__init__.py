"""The audit service and the core below it: what every front end shares below its own protocol.

A front end (the language server, the workspace audit, ``k3lsp audit``, ``k3lsp review``, ``k3lsp eval``) hands the
audit service (``service``) documents and gets events back: text to units, the witnesses' alerts, the scope, the
targets, a run on the daemon pool and the findings screened, in the project's own types, so the same settings
give the same findings whichever front end asked. Below the service, decided once for all of them: a run's values
(``run``), what the cache answers and keeps (``results``), which daemon takes which unit and when (``pool``: one
queue, interactive first, fail-over), one daemon's connection and state (``connection``, ``client``,
``replies``), one attempt at one unit (``request``), the model's tool calls answered (``answers``), its verdicts
folded in (``verdicts``), the settings every front end reads and their schema (``options``, ``schema``), the
changed-code scope (``scope``), and background tasks whose failures are seen (``tasks``).

It imports the parts below it (units, findings, tools, witnesses, git) and the contract (``k3lsp.wire``), never a
front end nor LSP (import-linter holds both).
"""
