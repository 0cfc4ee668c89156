"""Witnesses: real static analyzers whose alerts are evidence beside the model's findings (docs/witnesses.md).

The library function for every front end is :func:`k3lsp.witnesses.analyze.analyze`::

    from k3lsp.witnesses.analyze import analyze
    report = analyze(Path("drivers/x.c"), text, root=Path("."), names=["cppcheck", "clang"], cache=cache)
    for alert in report.alerts:  # k3lsp.witnesses.alert.Alert
        alert.tool, alert.rule, alert.cwe, alert.line, alert.message, alert.level

``tool`` is the witness's name (``cppcheck``, ``clang``, ``gcc``, ``sparse``, ``coccinelle``: the keys of
``k3lsp.witnesses.adapters.ADAPTERS``), ``rule`` the tool's check id, ``cwe`` the tool's CWE or one mapped
from the rule (None when neither), ``line`` 1-based in the file, ``message`` the tool's one-line text (never
a source excerpt), ``level`` the tool's own severity word. ``report.runs`` says per tool whether it ran,
came from the cache, or why not (missing, timed out, not confinable here), and ``report.outside`` how many
alerts were left out for naming a place outside the workspace. :func:`k3lsp.witnesses.analyze.available`
lists which witnesses this machine has. The language server shows the alerts at once (``k3lsp.witnesses.shown``) and
sends each unit's alerts to the model to triage (``k3lsp.core.verdicts``).
"""
