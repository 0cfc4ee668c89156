"""`python -m k3lsp`: the same as the `k3lsp` command (editors that know a Python but not the script use it)."""

import sys

from k3lsp.cli.main import main

sys.exit(main())
