"""The language server: LSP handlers and the session that translates LSP to the core and back."""
