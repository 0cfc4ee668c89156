"""The ``k3lsp`` command (docs/cli.md): with no arguments the language server on stdio, else a subcommand.

``main`` parses and dispatches (``audit``, ``review``, ``eval``, ``status``, ``witnesses``, ``keys``); ``batch`` is
``k3lsp audit`` (files to one run to report rows and an exit status, docs/batch.md), ``admission`` which files it
takes and what it says about the others before any work, ``sarif`` its SARIF 2.1.0, ``findings_text`` a finding
on a terminal as a compiler prints it, ``terminal`` rich tables and progress. A front end, and the top of the
layers: the one command imports the other front ends to dispatch to them.
"""
