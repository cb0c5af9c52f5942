"""Where llm_collapse keeps generated files (converted weights, embedding caches)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$LLM_COLLAPSE_CACHE`` if set, else ``$XDG_CACHE_HOME/llm_collapse`` or ``~/.cache/llm_collapse``."""
    if env := os.environ.get("LLM_COLLAPSE_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "llm_collapse"
