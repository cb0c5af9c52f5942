"""Embedder adapters: the registry of model specs and name resolution (including ``echo:<model>``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llm_collapse.adapters.catalog import EMBEDDERS
from llm_collapse.adapters.echo import ECHO_DEFAULT_INSTRUCTION, EchoFormat
from llm_collapse.adapters.spec import EmbedderSpec

__all__ = ["EMBEDDERS", "EmbedderSpec", "list_embedders", "resolve_spec"]

ECHO_PREFIX = "echo:"


def list_embedders() -> list[str]:
    """Registered embedder names; ``echo:<name-or-path>`` additionally wraps any causal decoder."""
    return EMBEDDERS.names()


def resolve_spec(name: str) -> tuple[EmbedderSpec, Path | None]:
    """Returns the spec for ``name`` and, for ``echo:/local/dir``, the implied local path."""
    if not isinstance(name, str):
        raise TypeError(f"embedder name must be a string, got {type(name).__name__}")
    if not name.lower().startswith(ECHO_PREFIX):
        return EMBEDDERS.get(name), None
    target = name[len(ECHO_PREFIX) :]
    if not target:
        raise ValueError(
            "'echo:' needs a causal decoder after the colon, e.g. echo:gemma3-270m or echo:/path/to/model"
        )
    echo = {
        "name": name,
        "input_format": EchoFormat(),
        "pooling": "mean",
        "max_length": None,  # per copy; derived from the model's positions at load time
        "default_instruction": ECHO_DEFAULT_INSTRUCTION,
        "aliases": (),
        "description": f"echo embeddings on {target}",
    }
    if target in EMBEDDERS:
        base = EMBEDDERS.get(target)
        if base.loader != "auto" or "bert" in base.architectures:
            raise ValueError(
                f"echo needs a causal decoder; {base.name!r} is not one (it uses {base.loader!r} / {base.architectures})"
            )
        return replace(base, **echo), None
    if Path(target).expanduser().exists():
        return EmbedderSpec(hub_id=None, source="path", **echo), Path(target).expanduser()
    return EmbedderSpec(hub_id=target, **echo), None
