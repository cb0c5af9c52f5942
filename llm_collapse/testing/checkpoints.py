"""Tiny, deterministic, random-weight checkpoints in the published on-disk layouts.

Each ``save_tiny_*`` builder writes a complete folder (config, weights, tokenizer) that
mirrors a real embedding model's repository, so the package's real loading code can be
exercised offline in well under a second per model.

Decisions and gotchas:

* Tensors are seeded per name and scaled to keep activations O(1)
  (`llm_collapse.testing.random_weights`); both NV-Embed FF spellings carry the same numbers.
* head_dim is 64 everywhere (vLLM's CPU backend accepts 32/64/80/...), and Gemma models
  use ``num_heads * head_dim != hidden_size`` as the real ones do.
* bge-multilingual-gemma2: q/k projections are scaled up (``qk_scale``) so attention
  logits reach tens and the 50.0 ``attn_logit_softcapping`` really changes the output
  (sdpa, which drops the softcap, then differs from eager).
* NV-Embed's real config needs remote code (``NVEmbedModel``, ``bidir_mistral``), so its
  ``config.json`` is written by hand in the transformers-4.42 shape (``rope_theta``, not
  ``rope_parameters``); its remote ``*.py`` files are not shipped.
* e5-mistral replicates a contradiction of the real repository: ``tokenizer_config.json``
  says ``add_eos_token: true`` but ``tokenizer.json``'s post-processor adds only ``<s>``.
  transformers 5 follows ``tokenizer.json``, so no ``</s>`` is appended on load.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from transformers import (
    Gemma2Config,
    Gemma2Model,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    MistralConfig,
    MistralForCausalLM,
    MistralModel,
)

from llm_collapse.testing.qwen_checkpoints import save_tiny_gte_qwen2, save_tiny_qwen3_embedding
from llm_collapse.testing.random_weights import init_tensor as _init_tensor
from llm_collapse.testing.random_weights import meta_shapes as _meta_shapes
from llm_collapse.testing.random_weights import prepare_folder as _prepare
from llm_collapse.testing.random_weights import write_checkpoint
from llm_collapse.testing.random_weights import write_json as _write_json
from llm_collapse.testing.tokenizers import build_gemma_tokenizer, build_llama_tokenizer, save_tokenizer

logger = logging.getLogger(__name__)

NV_EMBED_FF_KEY_STYLES: tuple[str, ...] = ("net.0", "net.0.proj")
"""Spellings of NV-Embed's first feed-forward projection: published / third-party."""

BGE_GEMMA2_EXTRA_TOKENS: tuple[str, ...] = ("<instruct>", "<query>")

_MISTRAL_INIT = {"norm_center": 1.0, "embed_std": 1.0}  # Mistral's RMSNorm multiplies by weight (centre 1)

_BGE_QK_SCALE = 6.0

_TINY_MISTRAL: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}

_TINY_NV_LATENT: dict[str, Any] = {"num_latents_value": 16, "num_cross_heads": 2}


# ----------------------------------------------------------------------------- NV-Embed


def _split_nv_overrides(overrides: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    latent_keys = {"num_latents_value", "num_cross_heads", "cross_dim_head"}
    latent = {k: v for k, v in overrides.items() if k in latent_keys}
    text = {k: v for k, v in overrides.items() if k not in latent_keys}
    return latent, text


def _nv_text_config_dict(config: MistralConfig) -> dict[str, Any]:
    """The ``text_config`` block in the published (transformers 4.42) shape."""
    text = config.to_dict()
    rope = text.pop("rope_parameters", None) or {}
    text["rope_theta"] = float(rope.get("rope_theta", 10000.0))
    text.pop("transformers_version", None)
    text.pop("dtype", None)
    text.update(
        {
            "_name_or_path": "nvidia/NV-Embed-v2",
            "architectures": ["MistralModel"],
            "model_type": "bidir_mistral",
            "torch_dtype": "float32",
            "use_cache": True,
        }
    )
    return text


def _nv_latent_shapes(
    hidden: int, n_latents: int, heads: int, dim_head: int, ff_key_style: str
) -> dict[str, tuple[int, ...]]:
    inner = heads * dim_head
    ff0 = "net.0.proj" if ff_key_style == "net.0.proj" else "net.0"
    block0 = "latent_attention_model.cross_attend_blocks.0"
    block1 = "latent_attention_model.cross_attend_blocks.1"
    return {
        "latent_attention_model.latents": (n_latents, hidden),
        f"{block0}.norm.weight": (hidden,),
        f"{block0}.norm.bias": (hidden,),
        f"{block0}.norm_context.weight": (hidden,),
        f"{block0}.norm_context.bias": (hidden,),
        f"{block0}.fn.to_q.weight": (inner, hidden),
        f"{block0}.fn.to_kv.weight": (2 * inner, hidden),
        f"{block0}.fn.to_out.weight": (hidden, inner),
        f"{block1}.norm.weight": (hidden,),
        f"{block1}.norm.bias": (hidden,),
        f"{block1}.fn.{ff0}.weight": (8 * hidden, hidden),
        f"{block1}.fn.{ff0}.bias": (8 * hidden,),
        f"{block1}.fn.net.2.weight": (hidden, 4 * hidden),
        f"{block1}.fn.net.2.bias": (hidden,),
    }


def _canonical_nv_name(name: str) -> str:
    """Seed name for a key: both FF spellings share the published name (same values)."""
    return name.replace(".fn.net.0.proj.", ".fn.net.0.")


def nv_embed_expected_keys(num_hidden_layers: int = 2, *, ff_key_style: str = "net.0") -> set[str]:
    """Return the exact safetensors key set of a (tiny) NV-Embed-v2 checkpoint.

    Args:
        num_hidden_layers: Number of Mistral decoder layers.
        ff_key_style: ``"net.0"`` (published) or ``"net.0.proj"``.

    Returns:
        Every tensor name the checkpoint holds.
    """
    keys = {"embedding_model.embed_tokens.weight", "embedding_model.norm.weight"}
    for i in range(num_hidden_layers):
        prefix = f"embedding_model.layers.{i}"
        keys |= {f"{prefix}.self_attn.{p}_proj.weight" for p in ("q", "k", "v", "o")}
        keys |= {f"{prefix}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
        keys |= {f"{prefix}.{n}_layernorm.weight" for n in ("input", "post_attention")}
    keys |= set(_nv_latent_shapes(1, 1, 1, 1, ff_key_style))
    return keys


def save_tiny_nv_embed(
    path: str | Path, *, seed: int = 0, ff_key_style: str = "net.0", **overrides: Any
) -> Path:
    """Write a tiny nvidia/NV-Embed-v2 replica (Mistral backbone + latent-attention pooler).

    Args:
        path: Output folder.
        seed: Seed of every tensor.
        ff_key_style: ``"net.0"`` as published, or ``"net.0.proj"`` for the first
            feed-forward projection of the latent-attention block.
        **overrides: ``num_latents_value``, ``num_cross_heads``, ``cross_dim_head`` for
            the pooler; anything else is a ``MistralConfig`` field of the backbone.

    Returns:
        The folder, holding ``config.json``, ``model.safetensors`` and the tokenizer.
    """
    if ff_key_style not in NV_EMBED_FF_KEY_STYLES:
        raise ValueError(f"ff_key_style must be one of {NV_EMBED_FF_KEY_STYLES}, got {ff_key_style!r}")
    out = _prepare(path)
    tokenizer = build_llama_tokenizer(add_bos=True, add_eos=False)
    latent_overrides, text_overrides = _split_nv_overrides(overrides)
    text_config = MistralConfig(**{**_TINY_MISTRAL, "vocab_size": len(tokenizer), **text_overrides})
    hidden = text_config.hidden_size
    latent = {**_TINY_NV_LATENT, "cross_dim_head": hidden, **latent_overrides}

    backbone = {f"embedding_model.{k}": v for k, v in _meta_shapes(MistralModel, text_config).items()}
    pooler = _nv_latent_shapes(
        hidden, latent["num_latents_value"], latent["num_cross_heads"], latent["cross_dim_head"], ff_key_style
    )
    state = {
        name: _init_tensor(_canonical_nv_name(name), shape, seed=seed, norm_center=1.0, embed_std=1.0)
        for name, shape in {**backbone, **pooler}.items()
    }
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})

    config = {
        "add_eos": True,
        "add_pad_token": True,
        "architectures": ["NVEmbedModel"],
        "auto_map": {
            "AutoConfig": "configuration_nvembed.NVEmbedConfig",
            "AutoModel": "modeling_nvembed.NVEmbedModel",
        },
        "hidden_size": hidden,
        "is_mask_instruction": True,
        "latent_attention_config": {
            "model_type": "latent_attention",
            "num_latents_value": latent["num_latents_value"],
            "num_cross_heads": latent["num_cross_heads"],
            "latent_dim": hidden,
            "hidden_dim": hidden,
            "cross_dim_head": latent["cross_dim_head"],
        },
        "mask_type": "b",
        "model_type": "nvembed",
        "padding_side": "right",
        "text_config": _nv_text_config_dict(text_config),
        "torch_dtype": "float32",
        "transformers_version": "4.42.4",
    }
    _write_json(out / "config.json", config)
    save_tokenizer(tokenizer, out)
    logger.info("wrote tiny NV-Embed-v2 (%s) to %s", ff_key_style, out)
    return out


# ----------------------------------------------------------------------------- Mistral family


def save_tiny_e5_mistral(path: str | Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a tiny intfloat/e5-mistral-7b-instruct replica (``MistralModel``, no lm_head).

    The tokenizer's ``tokenizer.json`` adds only ``<s>`` while ``tokenizer_config.json``
    says ``add_eos_token: true`` and ``pad_token: "</s>"``, as in the published repository.

    ``overrides``: ``MistralConfig`` fields (a builder's signature: `TINY_BUILDERS`); returns the folder.
    """
    tokenizer = build_llama_tokenizer(add_bos=True, add_eos=False)
    tokenizer.pad_token = "</s>"
    config = MistralConfig(
        **{**_TINY_MISTRAL, "vocab_size": len(tokenizer), "pad_token_id": 2, "use_cache": False, **overrides}
    )
    return write_checkpoint(
        path,
        MistralModel,
        config,
        tokenizer,
        seed=seed,
        tokenizer_config={"add_eos_token": True},
        **_MISTRAL_INIT,
    )


def save_tiny_mistral_instruct(path: str | Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a tiny mistralai/Mistral-7B-Instruct-v0.1 replica (``MistralForCausalLM``).

    ``overrides``: ``MistralConfig`` fields (a builder's signature: `TINY_BUILDERS`); returns the folder.
    """
    tokenizer = build_llama_tokenizer(add_bos=True, add_eos=False)
    config = MistralConfig(**{**_TINY_MISTRAL, "vocab_size": len(tokenizer), **overrides})
    return write_checkpoint(path, MistralForCausalLM, config, tokenizer, seed=seed, **_MISTRAL_INIT)


# ----------------------------------------------------------------------------- Gemma family


def save_tiny_bge_gemma2(
    path: str | Path, *, seed: int = 0, qk_scale: float = _BGE_QK_SCALE, **overrides: Any
) -> Path:
    """Write a tiny BAAI/bge-multilingual-gemma2 replica (``Gemma2Model``).

    Args:
        path: Output folder.
        seed: Seed of every tensor.
        qk_scale: Factor on q/k projection weights; the default pushes attention logits
            into the range where the 50.0 softcap matters.
        **overrides: ``Gemma2Config`` fields.

    Returns:
        The folder.
    """
    tokenizer = build_gemma_tokenizer(extra_special_tokens=BGE_GEMMA2_EXTRA_TOKENS, model_max_length=8192)
    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_activation": "gelu_pytorch_tanh",
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 4096,
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        **overrides,
    }
    fields.setdefault("query_pre_attn_scalar", fields["head_dim"])
    config = Gemma2Config(**fields)
    return write_checkpoint(
        path, Gemma2Model, config, tokenizer, seed=seed, **_gemma_init(config), qk_scale=qk_scale
    )


def save_tiny_gemma3(path: str | Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a tiny google/gemma-3-270m replica (``Gemma3ForCausalLM``, ``gemma3_text``).

    Six layers give the published 5 sliding : 1 full pattern; the sliding window is 16
    tokens so tests can exceed it.

    ``overrides``: ``Gemma3TextConfig`` fields (a builder's signature: `TINY_BUILDERS`); returns the folder.
    """
    tokenizer = build_gemma_tokenizer(model_max_length=32768)
    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_hidden_layers": 6,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": 16,
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        "rms_norm_eps": 1e-6,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        "tie_word_embeddings": True,
        **overrides,
    }
    fields.setdefault("query_pre_attn_scalar", fields["head_dim"])
    config = Gemma3TextConfig(**fields)
    return write_checkpoint(path, Gemma3ForCausalLM, config, tokenizer, seed=seed, **_gemma_init(config))


def _gemma_init(config) -> dict[str, float]:
    """Gemma's RMSNorm multiplies by ``1 + weight`` (centre 0); embeddings are scaled by sqrt(hidden) on input."""
    return {"norm_center": 0.0, "embed_std": 1.0 / math.sqrt(config.hidden_size)}


TINY_BUILDERS: dict[str, Callable[..., Path]] = {
    "nv-embed": save_tiny_nv_embed,
    "e5-mistral": save_tiny_e5_mistral,
    "bge-gemma2": save_tiny_bge_gemma2,
    "mistral-instruct": save_tiny_mistral_instruct,
    "gemma3": save_tiny_gemma3,
    "qwen3-embedding": save_tiny_qwen3_embedding,
    "gte-qwen2": save_tiny_gte_qwen2,
}
"""Short name -> builder; every builder is ``(path, *, seed=0, **overrides) -> Path``."""

TINY_LAYOUT_OF: dict[str, str] = {
    "mistral": "e5-mistral",
    "nv-embed": "nv-embed",
    "bge-gemma2": "bge-gemma2",
    "echo-mistral": "mistral-instruct",
    "gemma3-270m": "gemma3",
    "echo-gemma3-270m": "gemma3",
    "prompt-gemma3-270m": "gemma3",
    "twice-gemma3-270m": "gemma3",
    "qwen3-embedding-0.6b": "qwen3-embedding",
    "gte-qwen2": "gte-qwen2",
}
"""Catalog name -> the `TINY_BUILDERS` layout its tiny stand-in has (the weights the adapter expects on disk)."""
