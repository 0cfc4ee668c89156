"""The model's workspace tools: read, grep, definitions and references, confined to the workspace."""
