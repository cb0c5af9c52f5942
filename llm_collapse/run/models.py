"""Loading models the way a run needs them: the reference tokenizer alone, and each model with its
max_length fitted to the run's longest length."""

from __future__ import annotations

import logging

import llm_collapse as lc
from llm_collapse.adapters import resolve_spec
from llm_collapse.backends.hf import load_tokenizer
from llm_collapse.backends.weights import WeightsLocation, resolve_weights
from llm_collapse.run.config import CompareConfig

logger = logging.getLogger(__name__)


def reference_tokenizer(config: CompareConfig):
    """The first model's tokenizer, loaded without the model: it defines every text's length."""
    return load_tokenizer(model_weights(config.models[0], config).directory)


def model_weights(name: str, config: CompareConfig, *, convert: bool = True) -> WeightsLocation:
    """Where model ``name``'s files are, as the run finds them (``model_paths``); nothing is loaded. With
    ``convert=False`` a GGUF file not converted yet is returned as it is (a plan converts nothing)."""
    spec, implied = resolve_spec(name)
    return resolve_weights(
        spec.name,
        spec.hub_id,
        spec.source,
        config.model_paths.get(name) or implied,
        convert=convert,
        revision=spec.revision,
    )


def load_for_run(model_name: str, config: CompareConfig):
    """Loads one model as the run's config asks, with max_length fitted to the longest bin."""
    embedder = lc.load_embedder(
        model_name,
        path=config.model_paths.get(model_name),
        backend=config.backend,
        dtype=config.dtype,
        device=config.device,
        quantization=config.quant,
        pooling=config.pooling,
        batch_size=config.batch_size,
    )
    fit_max_length(embedder, config)
    return embedder


def fit_max_length(embedder, config: CompareConfig) -> None:
    """Raises max_length so the longest bin fits; absolute-position models are capped at their positions
    (minilm: 512), where longer texts are truncated, counted and reported."""
    needed = int(max(config.lengths) * 1.1) + 16  # the longest bin's texts plus prompt and special tokens
    if not embedder.backend.has_rope and embedder.backend.max_positions:
        needed = min(needed, embedder.backend.max_positions)
    if needed > embedder.max_length:
        logger.info(
            "%s: max_length raised from %d to %d tokens for the run's longest length",
            embedder.name,
            embedder.max_length,
            needed,
        )
        embedder.max_length = needed
