"""FLOP counting (`FlopModel`, `model_flops`; formula in the package docstring); the measured rate is `rate`.

`FlopModel` is the package's one FLOP formula: the benchmark builds it from a loaded model (`from_model`),
``--dry-run`` from a ``config.json`` dict (`from_config`), the GPU estimate from published dimensions
(`backbone_linear_params`), and the estimate's executed-work count goes through `FlopModel.pair_flops`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llm_collapse.models import BIDIRECTIONAL_MODEL_TYPES

ENCODER_TYPES = BIDIRECTIONAL_MODEL_TYPES
"""Bidirectional encoders (every other model type counts as causal): `llm_collapse.models`' one set."""

TWO_MATRIX_MLP = ENCODER_TYPES - {"modernbert", "nomic_bert", "new"}  # the others gate their MLP
"""Model types whose MLP is two matrices (hidden -> intermediate -> hidden); the others are gated: three
matrices (gate, up, down; ModernBERT's ``Wi`` is gate and up fused)."""


@dataclass(frozen=True)
class LayerShape:
    """The dimensions of a decoder's (or encoder's) layers that its linear weights follow."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    gated: bool = True
    """The MLP is 3 matrices (gate, up, down) when gated, else 2."""


def backbone_linear_params(shape: LayerShape) -> int:
    """Weights of every layer's q, k, v, o projections and MLP."""
    d_attn = shape.heads * shape.head_dim
    attention = 2 * shape.hidden * d_attn + 2 * shape.hidden * shape.kv_heads * shape.head_dim
    return shape.layers * (attention + (3 if shape.gated else 2) * shape.hidden * shape.intermediate)


def latent_pooler_linear_params(hidden: int, heads: int, head_dim: int, ff_mult: int = 4) -> int:
    """NV-Embed's latent-attention pooler weights: to_q, to_kv (2x), to_out and the GEGLU feed-forward
    (``hidden -> 2 ff_mult hidden``, ``ff_mult hidden -> hidden``); biases, norms and latents not included."""
    return 4 * hidden * heads * head_dim + 3 * ff_mult * hidden * hidden


@dataclass(frozen=True)
class FlopModel:
    """What FLOP counting needs from a model (see the package docstring for the formula).

    Attributes:
        linear_params: Weights of every ``nn.Linear`` of the backbone except a BERT pooler head.
        d_attn: Attention channels, ``num_heads * head_dim``.
        layer_windows: Per layer, the sliding window (None for a full-attention layer).
        causal: Causal decoder (False for bidirectional encoders).
    """

    linear_params: int
    d_attn: int
    layer_windows: tuple[int | None, ...]
    causal: bool

    @classmethod
    def from_model(cls, model) -> FlopModel:
        import torch

        linear = sum(
            m.weight.numel()
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and "pooler" not in name.split(".")
        )
        return cls._from_text_config(model.config.get_text_config(), linear)

    @classmethod
    def from_config(cls, config: Mapping) -> FlopModel:
        """The same counts as `from_model` on the model a ``config.json`` dict describes, without building it.

        The dict goes through its transformers config class first (derived fields such as Gemma's
        ``layer_types`` and ``head_dim`` then match the loaded model's); ``nvembed`` through
        `llm_collapse.models.nv_embed.NVEmbedConfig`, unknown types through ``PretrainedConfig``. Linear
        weights are counted from the dimensions (`backbone_linear_params`, plus NV-Embed's latent pooler):
        exact for the registered layouts (BERT, Mistral, Gemma 2/3, NV-Embed); others are approximated.
        """
        full = _config_object(config)
        text = full.get_text_config()
        hidden = int(text.hidden_size)
        heads = int(text.num_attention_heads)
        head_dim = _head_dim(text)
        linear = backbone_linear_params(
            LayerShape(
                hidden=hidden,
                layers=int(text.num_hidden_layers),
                heads=heads,
                kv_heads=int(getattr(text, "num_key_value_heads", None) or heads),
                head_dim=head_dim,
                intermediate=int(getattr(text, "intermediate_size", None) or 4 * hidden),
                gated=text.model_type not in TWO_MATRIX_MLP,
            )
        )
        latent = getattr(full, "latent_attention_config", None)
        if isinstance(latent, Mapping):
            linear += latent_pooler_linear_params(
                int(latent["latent_dim"]), int(latent["num_cross_heads"]), int(latent["cross_dim_head"])
            )
        return cls._from_text_config(text, linear)

    @classmethod
    def _from_text_config(cls, config, linear_params: int) -> FlopModel:
        """Attention width, per-layer windows and causality from a (text) transformers config."""
        heads = int(config.num_attention_heads)
        layers = int(config.num_hidden_layers)
        causal = config.model_type not in ENCODER_TYPES
        window = getattr(config, "sliding_window", None)
        # No layer_types (Mistral): a set window slides in every layer of a causal model, as transformers runs
        # it; a bidirectional one (NV-Embed's backbone keeps Mistral's 4096 in its config) applies none.
        every = "sliding_attention" if window and causal else "full_attention"
        types = getattr(config, "layer_types", None) or [every] * layers
        windows = tuple(window if (t == "sliding_attention" and window) else None for t in types)
        return cls(linear_params, heads * _head_dim(config), windows, causal)

    def pairs(self, length: int, window: int | None) -> int:
        """(query, key) pairs one layer needs for ``length`` tokens."""
        if not self.causal:
            return length * length
        if window is None or length <= window:
            return length * (length + 1) // 2
        return window * (window + 1) // 2 + (length - window) * window

    def flops(self, length: int) -> float:
        """Useful forward FLOPs for one text of ``length`` real tokens."""
        return self.pair_flops(length, sum(self.pairs(length, w) for w in self.layer_windows))

    def pair_flops(self, positions: int, pairs: int, *, qk_passes: int = 1) -> float:
        """Linear FLOPs of ``positions`` tokens plus attention FLOPs of ``pairs`` (query, key) pairs summed
        over layers: ``2 P n + 2 (qk_passes + 1) d_attn pairs`` (one QK^T product per pass, one PV product)."""
        return 2.0 * self.linear_params * positions + 2.0 * (qk_passes + 1) * self.d_attn * pairs

    def flops_dense(self, length: int) -> float:
        """The dense convention: ``2 P L + 4 layers d_attn L^2``."""
        return self.pair_flops(length, len(self.layer_windows) * length**2)

    def describe(self) -> dict:
        return {
            "linear_params": self.linear_params,
            "d_attn": self.d_attn,
            "layers": len(self.layer_windows),
            "sliding_layers": sum(w is not None for w in self.layer_windows),
            "window": next((w for w in self.layer_windows if w is not None), None),
            "causal": self.causal,
            "formula": "2*linear_params*L + 4*d_attn*sum_layers(pairs(L))",
        }


def _head_dim(config) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // int(config.num_attention_heads))


def _config_object(config: Mapping):
    """A ``config.json`` dict as its transformers config object (see `FlopModel.from_config`)."""
    from transformers import CONFIG_MAPPING, PretrainedConfig

    from llm_collapse.models.nv_embed import NVEmbedConfig

    model_type = config.get("model_type")
    if model_type == NVEmbedConfig.model_type:
        return NVEmbedConfig.from_dict(dict(config))
    if model_type in CONFIG_MAPPING:
        return CONFIG_MAPPING[model_type].from_dict(dict(config))
    return PretrainedConfig.from_dict(dict(config))


def model_flops(model, lengths: Sequence[int]) -> float:
    """Useful forward FLOPs of ``model`` over texts of the given token lengths (package docstring)."""
    counter = FlopModel.from_model(model)
    return sum(counter.flops(n) for n in lengths)
