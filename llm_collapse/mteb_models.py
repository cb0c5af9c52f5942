"""mteb model entries for the package's embedders: ``mteb.get_model("llm-collapse/<name>")`` loads one as an
`MTEBEncoder`, offline when its weights are local, with interventions chosen by a keyword.

Usage::

    import mteb
    import llm_collapse.mteb_models  # registers llm-collapse/<name> for every registered embedder

    model = mteb.get_model("llm-collapse/minilm")                                  # as loaded
    scaled = mteb.get_model("llm-collapse/minilm", interventions="tempscale:0.8")  # active while encoding
    mteb.evaluate(scaled, mteb.get_tasks(tasks=["STS12"]))

    python -m llm_collapse.mteb_models run -m llm-collapse/minilm -t STS12   # mteb's CLI, these models registered

Decisions
    - Registration writes `ModelMeta` entries with a loader into the dict `mteb.get_model` and
      `mteb.get_model_meta` read (``mteb.models.model_implementations.MODEL_REGISTRY``). mteb 2.26 has no plugin
      entry point for models; a `ModelMeta` with a loader is how its docs define a model. Importing this module
      registers them (``import llm_collapse`` does not: it imports no optional package, and mteb is a heavy one);
      `register` adds names registered later (spec files) or folder models (``st:PATH``).
    - ``mteb run`` cannot import this module itself, so ``python -m llm_collapse.mteb_models`` (the
      ``llm-collapse-mteb`` script) is mteb's own command line with the entries registered; mteb's CLI finds only
      mteb's own tasks.
    - Loader keywords (``mteb.get_model(name, **kwargs)``): ``interventions``, ``instructions`` and ``batch_size``
      go to `MTEBEncoder` (interventions are applied for each encode call, as there), everything else to
      `llm_collapse.load_embedder` (``dtype``, ``path``, ``max_length``...). mteb records them as the model's
      ``experiment_kwargs``, so runs with different interventions are filed in different result folders.
    - An entry's revision is a hash of its spec (`EmbedderSpec.describe`), known without reading weights; direct
      `MTEBEncoder` use keeps its own (a hash of the loaded embedder's settings), so the two file results apart.
    - ``embed_dim`` other than the model's own is refused: nothing here truncates vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections.abc import Iterable
from typing import Any

from llm_collapse.adapters import EmbedderSpec, list_embedders, resolve_spec
from llm_collapse.mteb_adapter import MODEL_PREFIX, MTEBEncoder, model_meta_for, require_mteb

logger = logging.getLogger(__name__)

_ENCODER_KWARGS = ("interventions", "instructions", "batch_size")


def mteb_name(name: str) -> str:
    """``llm-collapse/<canonical name>`` for an embedder name or alias."""
    return f"{MODEL_PREFIX}/{resolve_spec(name)[0].name}"


def model_meta(name: str):
    """The `mteb.ModelMeta` entry (with `load_model` as its loader) for embedder ``name``; reads no weights."""
    require_mteb()
    spec = resolve_spec(name)[0]
    return model_meta_for(
        spec,
        loader=load_model,
        name=f"{MODEL_PREFIX}/{spec.name}",
        revision=spec_revision(spec),
        max_tokens=spec.max_length,
        use_instructions=spec.input_format.takes_instruction,
        **_sizes(spec),
    )


def _sizes(spec: EmbedderSpec) -> dict[str, int]:
    """mteb's size fields from the catalog's published dimensions (none for models without them): parameters,
    the pooled vector's width (the hidden size for every registered pooling) and the weights' MB (mteb's own
    figure where the catalog quotes it, else bf16)."""
    dims = spec.published
    if dims is None:
        return {}
    size, _ = dims.download_bytes()
    return {"n_parameters": dims.params(), "embed_dim": dims.hidden, "memory_usage_mb": round(size / 2**20)}


def spec_revision(spec: EmbedderSpec) -> str:
    """A hash of what makes the spec embed as it does (`EmbedderSpec.describe` plus its weights' source)."""
    blob = json.dumps({**spec.describe(), "source": spec.source}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def register(names: Iterable[str] | None = None) -> list[str]:
    """Puts an entry for each embedder into mteb's model registry (again: replaced, so a changed spec is seen).

    Args:
        names: Embedder names, aliases or ``st:PATH``/``hf:PATH``; None: every registered embedder.

    Returns:
        The mteb names registered (``llm-collapse/<name>``).
    """
    require_mteb()
    from mteb.models.model_implementations import MODEL_REGISTRY

    registered = []
    for name in list_embedders() if names is None else names:
        meta = model_meta(name)
        MODEL_REGISTRY[meta.name] = meta
        registered.append(meta.name)
    logger.debug("registered %d mteb models: %s", len(registered), ", ".join(registered))
    return registered


def load_model(
    model_name: str, revision: str | None = None, *, embed_dim: int | None = None, **kwargs: Any
) -> MTEBEncoder:
    """The loader of every entry: ``llm-collapse/<name>`` -> `MTEBEncoder.from_name` (mteb calls it).

    Args:
        model_name: The entry's name, ``llm-collapse/<embedder name>``.
        revision: The entry's revision (checked by mteb; unused here).
        embed_dim: Refused unless None (vectors are never truncated).
        **kwargs: ``interventions``, ``instructions``, ``batch_size`` for `MTEBEncoder`; ``device`` and the rest
            for `llm_collapse.load_embedder`.

    Returns:
        The adapter; mteb then sets its ``mteb_model_meta`` to the entry, with ``kwargs`` as experiment kwargs.
    """
    if embed_dim is not None:
        raise ValueError(f"{model_name} has a fixed dimension; embed_dim={embed_dim} cannot be honoured")
    name = model_name.removeprefix(f"{MODEL_PREFIX}/")
    encoder = {key: kwargs.pop(key) for key in _ENCODER_KWARGS if key in kwargs}
    return MTEBEncoder.from_name(name, **encoder, **kwargs)


def main(argv: list[str] | None = None) -> int:
    """mteb's command line (``run``, ``available_tasks``...) with the package's models registered."""
    from llm_collapse.utils.commands import run_command

    def body() -> int:
        from mteb.cli.build_cli import build_cli

        register()
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        parser = build_cli()
        args = parser.parse_args(argv)
        if not hasattr(args, "func"):
            parser.print_help()
            return 2
        args.func(args)
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
else:
    register()
