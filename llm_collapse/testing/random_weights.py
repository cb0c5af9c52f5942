"""Seeded random weights and folder plumbing shared by the tiny-checkpoint builders (`llm_collapse.testing`).

Decisions and gotchas:

* Every tensor is drawn from its own ``torch.Generator`` seeded with ``crc32(seed, name)``: the same seed gives
  byte-identical tensors, a tensor's value does not depend on which other keys exist, and the global torch RNG
  is left untouched (model construction runs inside ``fork_rng``).
* Init keeps activations O(1): linear weights ``N(0, 1/fan_in)``, norm weights ``center + 0.1 N(0, 1)`` (center 1
  for ``x * w`` norms, 0 for Gemma's ``1 + w``), biases ``0.1 N(0, 1)``. Norm weights are deliberately not exactly
  1/0 so that a dropped or misplaced norm changes the output.
* Every folder gets `TINY_RANDOM_MARKER`: reports flag numbers from random weights as code-path checks.
"""

from __future__ import annotations

import json
import logging
import math
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import PretrainedConfig, PreTrainedModel

from llm_collapse.backends.weights import TINY_RANDOM_MARKER

logger = logging.getLogger(__name__)

__all__ = [
    "BIAS_STD",
    "NORM_JITTER",
    "init_tensor",
    "meta_shapes",
    "prepare_folder",
    "random_state_dict",
    "save_random_hf_model",
    "seeded_randn",
    "tensor_seed",
    "write_json",
]

NORM_JITTER = 0.1
BIAS_STD = 0.1


def tensor_seed(seed: int, name: str) -> int:
    return zlib.crc32(f"{seed}:{name}".encode())


def seeded_randn(shape: tuple[int, ...], *, seed: int, name: str) -> torch.Tensor:
    generator = torch.Generator().manual_seed(tensor_seed(seed, name))
    return torch.randn(shape, generator=generator, dtype=torch.float32)


def init_tensor(
    name: str,
    shape: tuple[int, ...],
    *,
    seed: int,
    norm_center: float,
    embed_std: float,
    qk_scale: float = 1.0,
) -> torch.Tensor:
    """Random tensor for parameter ``name``, scaled so activations stay O(1).

    Args:
        name: Parameter name; its seed and its kind (norm, bias, embedding, linear) follow
            from it.
        shape: Parameter shape.
        seed: Checkpoint seed.
        norm_center: Value norm weights scatter around (1 for ``x * w``, 0 for ``x * (1 + w)``).
        embed_std: Standard deviation of token embeddings.
        qk_scale: Extra factor for ``q_proj``/``k_proj`` weights.

    Returns:
        A float32 tensor.
    """
    noise = seeded_randn(shape, seed=seed, name=name)
    if name.endswith("latents"):
        return noise
    if len(shape) == 1:
        if name.endswith("bias"):
            return BIAS_STD * noise
        return norm_center + NORM_JITTER * noise
    if "embed_tokens" in name:
        return embed_std * noise
    scale = 1.0 / math.sqrt(shape[1])
    if name.endswith(("q_proj.weight", "k_proj.weight")):
        scale *= qk_scale
    return scale * noise


def random_state_dict(
    shapes: Mapping[str, tuple[int, ...]], *, seed: int, **init_kwargs: Any
) -> dict[str, torch.Tensor]:
    return {name: init_tensor(name, tuple(shape), seed=seed, **init_kwargs) for name, shape in shapes.items()}


def meta_shapes(model_cls: type[PreTrainedModel], config: PretrainedConfig) -> dict[str, tuple[int, ...]]:
    """Persistent parameter names and shapes of ``model_cls(config)``, without allocating."""
    with torch.device("meta"):
        model = model_cls(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def save_random_hf_model(
    model_cls: type[PreTrainedModel],
    config: PretrainedConfig,
    path: Path,
    *,
    seed: int,
    **init_kwargs: Any,
) -> None:
    """Fill ``model_cls(config)`` with seeded random weights and ``save_pretrained`` it."""
    shapes = meta_shapes(model_cls, config)
    if getattr(config, "tie_word_embeddings", False):
        shapes.pop("lm_head.weight", None)
    state = random_state_dict(shapes, seed=seed, **init_kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing={missing} unexpected={unexpected}")
    model.save_pretrained(path)


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def prepare_folder(path: str | Path) -> Path:
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    # Reports look for this file: numbers from random weights are code-path checks, never findings.
    (out / TINY_RANDOM_MARKER).write_text(
        "Random weights built by llm_collapse.testing; not a trained model.\n"
    )
    return out


def write_checkpoint(
    path: str | Path,
    model_cls: type[PreTrainedModel],
    config: PretrainedConfig,
    tokenizer,
    *,
    seed: int,
    tokenizer_config: Mapping[str, Any] | None = None,
    config_edits: Mapping[str, Any] | None = None,
    **init_kwargs: Any,
) -> Path:
    """The one writer of a tiny checkpoint: a prepared folder, seeded random weights (`save_random_hf_model`),
    the published ``config.json`` keys ``save_pretrained`` does not write (``config_edits``), the tokenizer
    (``tokenizer_config``: extra ``tokenizer_config.json`` keys). Returns the folder."""
    from llm_collapse.testing.tokenizers import save_tokenizer

    out = prepare_folder(path)
    save_random_hf_model(model_cls, config, out, seed=seed, **init_kwargs)
    if config_edits:
        written = json.loads((out / "config.json").read_text(encoding="utf-8"))
        write_json(out / "config.json", {**written, **config_edits})
    save_tokenizer(tokenizer, out, **(tokenizer_config or {}))
    logger.info("wrote a tiny %s (%s) to %s", model_cls.__name__, config.model_type, out)
    return out
