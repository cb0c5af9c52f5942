"""Embedder adapters: the registry of model specs, name resolution (including ``echo:<model>`` and the folder
models ``st:PATH`` / ``hf:PATH``, `llm_collapse.adapters.folder`) and `register_embedder` for specs written as data
(`llm_collapse.adapters.spec_file`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from llm_collapse.adapters.catalog import EMBEDDERS
from llm_collapse.adapters.echo import ECHO_DEFAULT_INSTRUCTION, EchoFormat
from llm_collapse.adapters.folder import FOLDER_PREFIXES, ST_PREFIX, ModelFolderError, hf_keys, st_keys
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.adapters.spec_file import SpecError, load_spec_file, spec_from_mapping

__all__ = [
    "EMBEDDERS",
    "EmbedderSpec",
    "ModelFolderError",
    "SpecError",
    "folder_spec",
    "list_embedders",
    "register_embedder",
    "resolve_spec",
]

logger = logging.getLogger(__name__)

ECHO_PREFIX = "echo:"
_RESERVED = (ECHO_PREFIX, *FOLDER_PREFIXES)


def list_embedders() -> list[str]:
    """Registered embedder names; ``echo:<name-or-path>`` additionally wraps any causal decoder."""
    return EMBEDDERS.names()


def register_embedder(spec: EmbedderSpec | Mapping | str | Path) -> EmbedderSpec:
    """Registers an embedder for this process, so `load_embedder` and ``compare --models`` know its name.

    Args:
        spec: An `EmbedderSpec`, a mapping of spec-file keys, or the path of a YAML/JSON spec file (format in
            `llm_collapse.adapters.spec_file`).

    Returns:
        The registered spec. Registering an equal spec again (the same file twice, or every rank of a
        distributed run) returns the one already registered.

    Raises:
        SpecError: Invalid spec, or its name or an alias is taken by a different embedder (one line).
    """
    if isinstance(spec, (str, Path)):
        spec = load_spec_file(spec)
    elif isinstance(spec, Mapping):
        spec = spec_from_mapping(spec, where="register_embedder")
    elif not isinstance(spec, EmbedderSpec):
        raise TypeError(
            f"register_embedder takes an EmbedderSpec, a mapping or a file path, not {type(spec).__name__}"
        )
    for key in (spec.name, *spec.aliases):
        if (reserved := next((p for p in _RESERVED if key.lower().startswith(p)), None)) is not None:
            raise SpecError(f"embedder name {key!r} starts with {reserved!r}, which is reserved; rename it")
        if key in EMBEDDERS:
            taken = EMBEDDERS.get(key)
            if taken == spec and taken.name == spec.name:
                return taken
            raise SpecError(
                f"embedder name {key!r} is already registered (as {taken.name!r}); give the spec another name"
            )
    logger.info("registered embedder %s", spec.name)
    return EMBEDDERS.register(spec.name, spec, aliases=spec.aliases)


def resolve_spec(name: str) -> tuple[EmbedderSpec, Path | None]:
    """Returns the spec for ``name`` and, for ``echo:/local/dir``, the implied local path.

    ``st:PATH`` and ``hf:PATH`` are read from the folder each time (`folder_spec`); their spec names the folder's
    transformer as its source, so no implied path is returned.
    """
    if not isinstance(name, str):
        raise TypeError(f"embedder name must be a string, got {type(name).__name__}")
    if name[:3].lower() in FOLDER_PREFIXES:
        return folder_spec(name), None
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
    if target[:3].lower() in FOLDER_PREFIXES:
        raise ValueError(
            f"echo: reads a causal decoder by its catalog name or its folder, not {target[:3]} (echo embeddings pool "
            f"the model themselves); write echo:{target[3:] or '/path/to/model'}"
        )
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


def folder_spec(name: str) -> EmbedderSpec:
    """The spec of ``st:PATH`` (a sentence-transformers folder) or ``hf:PATH`` (a plain transformers folder).

    Built from the folder's own files (`llm_collapse.adapters.folder`) through the spec-file validation, so it is
    the spec a file with only ``name`` and ``path`` (plus ``pooling`` for ``hf:``) would give; it is named ``name``
    as written, like ``echo:PATH``, and is not registered.

    Raises:
        ModelFolderError: The folder is missing, incomplete, or uses what the package does not reproduce.
    """
    prefix, target = name[:3].lower(), name[3:]
    if not target.strip():
        raise ModelFolderError(
            f"{prefix!r} needs a model folder after the colon, e.g. {prefix}/models/all-MiniLM-L6-v2"
        )
    keys = st_keys(target) if prefix == ST_PREFIX else hf_keys(target)
    spec = spec_from_mapping({"name": "folder", **keys}, where=name, read_folder=False)
    kind = "sentence-transformers" if prefix == ST_PREFIX else "transformers"
    return replace(spec, name=name, description=f"{kind} folder {target} ({spec.pooling} pooling)")
