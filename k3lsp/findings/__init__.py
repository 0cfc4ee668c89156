"""The finding model and what is reported of it, the same for every front end.

A finding is what the model reported with ``report_finding``, validated against its unit (``model``), placed in its
file in the project's own positions and ranges (``spans``: LSP's counting, so the language server's edge copies);
the pipeline (``pipeline``) decides what of a unit's results is shown and how the rest was silenced (``suppress``:
inline ``k3-audit: ignore`` comments and the baseline; ``silencing``: in a review, only what the patches' base
had), so a finding in the editor is the one ``k3lsp audit`` reports, on the same lines with the same fingerprint.
A part of the layer below the service: it imports units, git and the contract, never the core, a front end or LSP.
"""
