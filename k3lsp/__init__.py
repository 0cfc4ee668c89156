"""k3lsp: the editor side of the k3 security-audit model (language server, client, CLI).

Never imports mlx: the editor side must install and run on machines without it.
"""

__version__ = "0.1.0"
