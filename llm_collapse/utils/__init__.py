"""Small shared helpers (paths, optional imports, logging setup for CLIs)."""
