"""The `k3lsp` command, its batch audit and its output (text, JSON, SARIF)."""
