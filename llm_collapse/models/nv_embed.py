"""A native transformers-5 implementation of nvidia/NV-Embed-v2 (no ``trust_remote_code``).

Why native
    The published ``modeling_nvembed.py`` targets transformers 4.42.4: it imports names that transformers 5 removed
    (``MISTRAL_INPUTS_DOCSTRING``, ``_prepare_4d_attention_mask*``), re-implements Mistral's forward for the 4.x cache
    API, and drags in ``datasets``/``einops``. Worse, when such remote code half-works, weights whose names it no
    longer matches are *newly initialised* with only a log warning, so a "loaded" model can silently be random. Here
    the backbone is transformers' own :class:`~transformers.MistralModel`, the pooler is a small module whose
    parameter names equal the checkpoint keys, loading goes through ``PreTrainedModel.from_pretrained`` (so sharding,
    ``dtype``, ``device_map`` and bitsandbytes work), ``auto_map`` is ignored, and :func:`load_nv_embed` refuses any
    missing, unexpected or size-mismatched weight.

Architecture (matches the published checkpoint layout key for key)
    * ``embedding_model``: a Mistral backbone run **bidirectionally** (no causal mask). The original's mask path
      (``_prepare_4d_attention_mask``) also never applied Mistral's sliding window, so none is applied here either.
    * ``latent_attention_model``: token hidden states are the *queries*, a learned ``latents`` matrix (512 x 4096)
      provides keys and values. ``h = attn(norm(h), context=norm_context(latents)) + h`` (8 heads of width 4096,
      ``F.scaled_dot_product_attention`` with its default 1/sqrt(d) scale, no mask), then
      ``h = ff(norm(h)) + h`` with a GEGLU feed-forward (Linear H->8H, value * gelu(gate), Linear 4H->H).
    * The original then mean-pools ``h`` over the pool mask and L2-normalises. Those two steps are left to the
      package's generic pooling: :meth:`NVEmbedModel.forward` returns the per-token states (B, L, H).

Published quirks (handled by the package's input formatting, not here; recorded so nobody "fixes" them twice)
    * The original appends EOS as *text* (``instruction + text + tokenizer.eos_token``) before tokenising with
      ``truncation=True``, so inputs longer than ``max_length`` lose their EOS.
    * The pool mask zeroes the first ``len(tokenizer.tokenize(instruction))`` positions. BOS sits at position 0, so
      this is off by one: BOS is masked and the last instruction token stays in the pool (only with right padding
      and a non-empty instruction; passages pool over BOS too).
    * The original forward ran under ``torch.autocast("cuda")`` (fp16 autocast, so LayerNorm and softmax ran in
      fp32). This module computes in the dtype the weights were loaded in; wrap the call in autocast to mimic it.

How the transformers-5 seams are used
    * Bidirectional attention: every backbone ``self_attn.is_causal`` is set to False (read by the sdpa/flash
      integrations), the backbone config gets ``is_causal=False`` and ``sliding_window=None``, and
      :meth:`NVEmbedModel.forward` prepares the mask itself (:func:`key_padding_mask`) with transformers'
      ``create_bidirectional_mask`` for the implementation in use: no mask at all for an unpadded batch (the
      kernels then attend to every key), and for a padded one the least mask the kernel needs. A bidirectional
      mask depends on the key only, so it is built for one query row: a (B, 1, 1, L) boolean (sdpa) or additive
      (eager) mask that broadcasts over the queries, the (B, L) padding for ``chunked``/flash, a ``BlockMask``
      for flex kernels (which need the real query length). Memory stays linear in L (the dense (B, 1, L, L)
      mask built before peaked at 12 GiB at 32k tokens on the two-layer replica).
      ``MistralModel.forward`` hands a prepared mask (or None) to the layers as-is.
    * Key renaming: :meth:`NVEmbedModel.from_pretrained` adds a ``key_mapping`` entry so a checkpoint that spells
      the first feed-forward projection ``...cross_attend_blocks.1.fn.net.0.proj.{weight,bias}`` loads into
      ``...net.0``; nothing is registered globally.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import MistralConfig, MistralModel, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput

__all__ = [
    "LATENT_ATTENTION_DEFAULTS",
    "FF_PROJ_KEY_MAPPING",
    "NVEmbedConfig",
    "LatentAttentionPooler",
    "NVEmbedModel",
    "key_padding_mask",
    "load_nv_embed",
]

#: Defaults of the published ``LatentAttentionConfig`` (NV-Embed-v2), used for any field its json leaves out.
LATENT_ATTENTION_DEFAULTS: dict[str, Any] = {
    "num_latents_value": 512,
    "num_cross_heads": 8,
    "latent_dim": 4096,
    "hidden_dim": 4096,
    "cross_dim_head": 4096,
    "output_normalize": True,
}

#: Accepts the third-party spelling of the first feed-forward projection (regex source -> target, as used by
#: ``from_pretrained(key_mapping=...)``).
FF_PROJ_KEY_MAPPING: dict[str, str] = {
    r"cross_attend_blocks\.1\.fn\.net\.0\.proj\.": "cross_attend_blocks.1.fn.net.0.",
}

# Keys of a sub-config dict that must not reach MistralConfig: the published "bidir_mistral" model type, and any
# remote-code pointer.
_DROPPED_TEXT_KEYS = ("model_type", "auto_map")


def _latent_attention_fields(value: Any) -> dict[str, Any]:
    """The published latent-attention settings with every missing field filled from the defaults."""
    if value is None:
        given: dict[str, Any] = {}
    elif isinstance(value, PretrainedConfig):
        given = value.to_dict()
    elif isinstance(value, dict):
        given = dict(value)
    else:
        raise TypeError(f"latent_attention_config must be a dict or None, got {type(value).__name__}")
    fields = {"model_type": "latent_attention", **LATENT_ATTENTION_DEFAULTS}
    fields.update({k: v for k, v in given.items() if k not in ("auto_map",)})
    return fields


class NVEmbedConfig(PretrainedConfig):
    """Configuration of NV-Embed-v2, read from the checkpoint's published ``config.json``.

    ``text_config`` (published with ``model_type: "bidir_mistral"``) becomes a :class:`~transformers.MistralConfig`;
    its ``sliding_window`` is set to None and ``is_causal`` to False because the backbone attends bidirectionally
    over the whole input (the original's mask path bypassed the window). ``latent_attention_config`` stays a plain
    dict with missing fields filled from :data:`LATENT_ATTENTION_DEFAULTS`. ``auto_map`` is dropped: no code is ever
    imported from a checkpoint folder. The class is not registered with ``AutoConfig``.
    """

    model_type = "nvembed"
    sub_configs_defaults = {"text_config": MistralConfig}

    text_config: dict | PretrainedConfig | None = None
    latent_attention_config: dict | None = None
    add_eos: bool = True
    add_pad_token: bool = True
    is_mask_instruction: bool = True
    mask_type: str = "b"
    padding_side: str = "right"
    hidden_size: int = 4096

    def __post_init__(self, **kwargs):
        kwargs.pop("auto_map", None)
        if isinstance(self.text_config, dict):
            self.text_config = {k: v for k, v in self.text_config.items() if k not in _DROPPED_TEXT_KEYS}
        self.latent_attention_config = _latent_attention_fields(self.latent_attention_config)
        super().__post_init__(**kwargs)
        # Bidirectional over the full input: no causal mask and no sliding window, for every attention backend.
        self.text_config.sliding_window = None
        self.text_config.is_causal = False


class _PreNorm(nn.Module):
    """LayerNorm on the input (and on the context, when there is one) before ``fn``."""

    def __init__(self, dim: int, fn: nn.Module, context_dim: int | None = None) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn
        self.norm_context = nn.LayerNorm(context_dim) if context_dim is not None else None

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        if self.norm_context is None:
            return self.fn(self.norm(x))
        return self.fn(self.norm(x), context=self.norm_context(context))


class _CrossAttention(nn.Module):
    """Multi-head attention of the tokens (queries) over a context (keys and values); projections have no bias."""

    def __init__(self, query_dim: int, context_dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.dim_head = dim_head
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_kv = nn.Linear(context_dim, 2 * inner, bias=False)
        self.to_out = nn.Linear(inner, query_dim, bias=False)
        # sdpa's default scale, kept as an attribute so an attention temperature can reach the pooler on request.
        self.scaling = dim_head**-0.5

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        # x: (B, L, query_dim) token states; context: (N, context_dim) latents, shared by the whole batch.
        batch, length, _ = x.shape
        n_ctx = context.shape[0]
        q = self.to_q(x).view(batch, length, self.heads, self.dim_head).transpose(1, 2)  # (B, heads, L, d)
        k, v = self.to_kv(context).chunk(2, dim=-1)  # each (N, heads * d): keys first, then values
        k = k.view(n_ctx, self.heads, self.dim_head).transpose(0, 1)  # (heads, N, d)
        v = v.view(n_ctx, self.heads, self.dim_head).transpose(0, 1)  # (heads, N, d)
        k = k.unsqueeze(0).expand(batch, -1, -1, -1)  # (B, heads, N, d)
        v = v.unsqueeze(0).expand(batch, -1, -1, -1)  # (B, heads, N, d)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)  # (B, heads, L, d), no mask
        out = out.transpose(1, 2).reshape(batch, length, self.heads * self.dim_head)  # (B, L, heads * d)
        return self.to_out(out)  # (B, L, query_dim)


class _GEGLU(nn.Module):
    """Splits the last dim into (value, gate) halves and returns ``value * gelu(gate)`` (exact, erf GELU)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = x.chunk(2, dim=-1)
        return value * F.gelu(gate)


class _FeedForward(nn.Module):
    """``net.0``: Linear dim -> 2*mult*dim (bias); GEGLU; ``net.2``: Linear mult*dim -> dim (bias)."""

    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), _GEGLU(), nn.Linear(dim * mult, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LatentAttentionPooler(nn.Module):
    """NV-Embed's latent-attention block; returns per-token states (B, L, H), before mean pooling.

    Parameter names equal the published checkpoint keys under ``latent_attention_model.``: ``latents``,
    ``cross_attend_blocks.0.{norm,norm_context}``, ``cross_attend_blocks.0.fn.{to_q,to_kv,to_out}``,
    ``cross_attend_blocks.1.norm``, ``cross_attend_blocks.1.fn.net.{0,2}``.

    Args:
        num_latents_value: Number of learned latents (keys/values of the cross-attention).
        num_cross_heads: Attention heads.
        latent_dim: Width of the latents and of the token states (queries).
        hidden_dim: Width of the context fed to ``to_kv`` (the latents; equals ``latent_dim`` in every release).
        cross_dim_head: Width of each head (4096 in NV-Embed-v2, so the inner width is heads * 4096).
    """

    def __init__(
        self,
        num_latents_value: int = 512,
        num_cross_heads: int = 8,
        latent_dim: int = 4096,
        hidden_dim: int = 4096,
        cross_dim_head: int = 4096,
        **_: Any,
    ) -> None:
        super().__init__()
        if latent_dim != hidden_dim:
            raise ValueError(
                f"NV-Embed latent attention needs latent_dim == hidden_dim (the latents are the context), "
                f"got {latent_dim} and {hidden_dim}"
            )
        attention = _CrossAttention(latent_dim, hidden_dim, heads=num_cross_heads, dim_head=cross_dim_head)
        self.cross_attend_blocks = nn.ModuleList(
            [
                _PreNorm(latent_dim, attention, context_dim=hidden_dim),
                _PreNorm(latent_dim, _FeedForward(latent_dim)),
            ]
        )
        self.latents = nn.Parameter(torch.randn(num_latents_value, latent_dim))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        attend, feed_forward = self.cross_attend_blocks
        h = attend(hidden_states, context=self.latents) + hidden_states  # (B, L, H)
        return feed_forward(h) + h  # (B, L, H)


class NVEmbedModel(PreTrainedModel):
    """NV-Embed-v2: a bidirectional Mistral backbone (``embedding_model``) and a latent-attention pooler
    (``latent_attention_model``), loadable from the published safetensors layout with ``from_pretrained``.

    Use :func:`load_nv_embed` to load with a strict check that every weight came from the checkpoint.
    """

    config_class = NVEmbedConfig
    base_model_prefix = ""
    main_input_name = "input_ids"
    _no_split_modules = ["MistralDecoderLayer", "LatentAttentionPooler"]
    _supports_sdpa = True
    _supports_flash_attn = True

    def __init__(self, config: NVEmbedConfig) -> None:
        super().__init__(config)
        text = config.text_config
        latent = config.latent_attention_config
        if text.hidden_size != latent["latent_dim"]:
            raise ValueError(
                f"NV-Embed config mismatch: backbone hidden_size {text.hidden_size} != latent_dim {latent['latent_dim']}"
            )
        self.embedding_model = MistralModel(text)
        for layer in self.embedding_model.layers:
            layer.self_attn.is_causal = False
        self.latent_attention_model = LatentAttentionPooler(**latent)
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained`` that also accepts the ``...fn.net.0.proj.*`` feed-forward spelling.

        A caller's own ``key_mapping`` entries are applied alongside :data:`FF_PROJ_KEY_MAPPING`.
        """
        key_mapping = dict(FF_PROJ_KEY_MAPPING)
        key_mapping.update(kwargs.pop("key_mapping", None) or {})
        return super().from_pretrained(
            pretrained_model_name_or_path, *model_args, key_mapping=key_mapping, **kwargs
        )

    def _init_weights(self, module: nn.Module) -> None:
        # Only reached for weights the checkpoint did not provide (transformers' init helpers skip loaded tensors).
        super()._init_weights(module)
        if isinstance(module, LatentAttentionPooler):
            init.normal_(module.latents, mean=0.0, std=1.0)

    def get_input_embeddings(self) -> nn.Module:
        return self.embedding_model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embedding_model.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        output_hidden_states: bool = False,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput:
        """Run the bidirectional backbone and the latent-attention block.

        Args:
            input_ids: (B, L) token ids (or pass ``inputs_embeds``).
            attention_mask: (B, L) 1 for real tokens, 0 for padding (default: all ones). An already prepared 4D
                mask is passed through unchanged.
            position_ids: (B, L) positions; default ``arange(L)`` as in the original (right padding).
            output_hidden_states: Also return the backbone's per-layer hidden states.
            inputs_embeds: (B, L, H) embeddings instead of ``input_ids``.
            **kwargs: Forwarded to ``MistralModel.forward``.

        Returns:
            ``BaseModelOutput`` with ``last_hidden_state`` = the pooler's per-token output (B, L, H) (mean-pool it
            over the pool mask and L2-normalise to get the embedding) and ``hidden_states`` = the backbone's.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embedding_model.embed_tokens(input_ids)  # (B, L, H)
        if attention_mask is None:
            attention_mask = torch.ones(
                inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device
            )
        if attention_mask.dim() == 2:
            attention_mask = key_padding_mask(self.embedding_model.config, inputs_embeds, attention_mask)
        backbone = self.embedding_model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
            use_cache=False,
            **kwargs,
        )
        tokens = self.latent_attention_model(backbone.last_hidden_state)  # (B, L, H)
        return BaseModelOutput(
            last_hidden_state=tokens,
            hidden_states=backbone.hidden_states if output_hidden_states else None,
            attentions=getattr(backbone, "attentions", None),
        )


def key_padding_mask(config: PretrainedConfig, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor):
    """The bidirectional mask of ``config._attn_implementation`` for a (B, L) padding mask, built for one query row.

    Returns None without padding; else (B, 1, 1, L) boolean / additive, (B, L), or a full-length ``BlockMask``
    (module docstring). Every form masks exactly the padded keys for every query.
    """
    mask = create_bidirectional_mask(
        config=config, inputs_embeds=inputs_embeds[:, :1], attention_mask=attention_mask
    )  # q_length 1, kv_length from the 2D mask
    if mask is None or isinstance(mask, torch.Tensor):
        return mask
    return create_bidirectional_mask(
        config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
    )


def load_nv_embed(path: str | os.PathLike, **from_pretrained_kwargs: Any) -> NVEmbedModel:
    """Load NV-Embed-v2 from a local folder (or hub id) and refuse anything but an exact layout match.

    Args:
        path: Checkpoint folder with the published ``config.json`` and safetensors files.
        **from_pretrained_kwargs: Passed to :meth:`NVEmbedModel.from_pretrained` (``dtype``, ``device_map``,
            ``quantization_config``, ``attn_implementation``, ...).

    Raises:
        ValueError: If any weight is missing from the checkpoint, unexpected in it, or has the wrong shape (so no
            parameter is ever left at its random initialisation).
    """
    from_pretrained_kwargs.pop("output_loading_info", None)
    # Let transformers record size mismatches instead of raising its own error: we raise one uniform ValueError.
    from_pretrained_kwargs["ignore_mismatched_sizes"] = True
    model, info = NVEmbedModel.from_pretrained(path, output_loading_info=True, **from_pretrained_kwargs)
    problems = []
    for label, key in (("missing", "missing_keys"), ("unexpected", "unexpected_keys")):
        if info.get(key):
            problems.append(f"{label} {sorted(info[key])}")
    if info.get("mismatched_keys"):
        # Entries are (key, checkpoint shape, model shape).
        shapes = sorted(
            f"{k}: checkpoint {tuple(ckpt)} vs model {tuple(mdl)}" for k, ckpt, mdl in info["mismatched_keys"]
        )
        problems.append(f"size-mismatched {shapes}")
    if info.get("error_msgs"):
        problems.append(f"errors {list(info['error_msgs'])}")
    if problems:
        raise ValueError(
            f"NV-Embed checkpoint at {path} does not match the NV-Embed-v2 layout: {', '.join(problems)}"
        )
    return model
