"""`k3lsp review`: what is under review, the changed units audited, the report."""
