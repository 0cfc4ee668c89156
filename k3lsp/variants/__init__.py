"""Variants of a finding across the tree (docs/kernel.md): the model writes a Coccinelle rule for the finding's
pattern, spatch finds the places that match it, and the model triages each one as the same bug or not.

The steps, one module each: :mod:`~k3lsp.variants.rule` takes the rule out of the model's answer and refuses one
that could run code or read a file before spatch sees it; :mod:`~k3lsp.variants.spatch` checks and runs it in the
witnesses' sandbox, bounded in files, time and matches; :mod:`~k3lsp.variants.origin` reads the finding to start
from (a report's, or a file and line); :mod:`~k3lsp.variants.hunt` asks the model for the rule, retries on a
parse error or a miss of the finding's own line, and sends each match to the model as an analyzer alert on its
unit; :mod:`~k3lsp.variants.command` is ``k3lsp variants``.
"""
