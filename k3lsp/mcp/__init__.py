"""``k3lsp mcp``: the audit service as a Model Context Protocol server on stdio, for coding agents.

A thin front end like the language server (docs/agents.md): each tool translates its arguments into the audit
service's documents and job (``k3lsp.core.service``) or into a review (``k3lsp.review.changed``), and its events into
structured results; results come from the same cache and store as the editors'. Every path an agent names is
confined to the workspace root by the model's own tool rules (``k3lsp.tools.confine``); connection settings come
only from the command line and environment the user wrote, never from a tool argument.
"""
