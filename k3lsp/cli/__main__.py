"""`python -m k3lsp.cli`: the `k3lsp` command (Neovim's `python` setting starts the server so)."""

import sys

from k3lsp.cli.main import main

sys.exit(main())
