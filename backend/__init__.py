"""k3-backend: the daemon that serves the audit model with mlx-lm. The only package that imports mlx."""
