"""The contract between the two programs: what the editor side and the daemon must compute the same way.

The wire protocol and its error codes (``protocol``), how much one unit may report and which lines a finding
may name (``bounds``), a unit's address, a result's key and when a result is complete (``address``), the
result table both keep (``cache``), the private socket and the key files (``local``, ``keys``), the one
sanitiser for text on its way to a person or a log (``sanitize``), the one reader of files a repository or a
flag names (``supplied``: a regular file, never blocking, bounded), child Python processes that import
nothing from the current directory (``isolated``), and how every command of both ends on a signal or a closed
stdout (``ending``).

This package imports nothing else of ``k3lsp``, and it is the only part of ``k3lsp`` that ``backend`` imports
(with the package root, for ``__version__``);
import-linter holds both rules (``[tool.importlinter]`` in pyproject.toml, run by ``.ci/run``).
"""
