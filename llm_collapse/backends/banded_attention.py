"""Sliding-window attention that only computes the window: ``attn_implementation="banded"``.

Why
    transformers' sdpa path hands a sliding-window layer a dense boolean (B, 1, L, L) mask, so torch's fused
    kernel computes all L^2 logits and throws away all but ``L x window`` of them. For Gemma 3 (15 of 18
    layers slide over 512 tokens) at 32k tokens that is 64x the needed work in those layers and a 1 GiB mask
    per text; measured on the 2-core CPU it made one 32k document take ~470 s. This implementation gives
    every sliding layer only its key band, query chunk by query chunk, through the same fused sdpa kernel.
    Full-attention layers and everything it cannot speed up go to transformers' own sdpa function unchanged,
    so results equal sdpa's to float rounding (the kernel sees other block boundaries) and eager's to 1e-5.

What it computes
    - Sliding layer (``sliding_window`` given, shorter than the keys): for each chunk of ``window`` queries,
      sdpa over keys ``[first query - window + 1, last query]`` with the exact band mask
      ``0 <= q - k < window`` (queries aligned bottom-right against the keys, as transformers does), and the
      padding mask's slice when the batch is padded.
    - Anything else (full layers, bidirectional layers, inputs no longer than the window): transformers'
      ``sdpa_attention_forward`` with the same arguments; full causal layers without padding therefore keep
      ``is_causal=True``, which lets the kernel skip the upper triangle.
    - A logit softcap (Gemma 2) is refused by sdpa; use ``"chunked"`` for those models.

Masks (memory linear in length for unpadded inputs)
    The registered mask function returns None for a sliding-window layer of an unpadded batch (the band is
    built per chunk from positions), and transformers' ``sdpa_mask`` otherwise (None for unpadded full causal
    layers; a boolean mask for padded batches, which the planner keeps short by sorting texts by length).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from llm_collapse.backends.mask_patterns import is_causal_band
from llm_collapse.metrics.attention import mask_rows

__all__ = ["BANDED", "banded_attention_forward", "banded_mask", "register"]

BANDED = "banded"
"""Registered (and user-facing) name; free of "sdpa"/"flash"/"flex", on which transformers dispatches."""


def banded_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; see the module docstring.

    Args:
        module: The calling attention module (``is_causal``, ``num_key_value_groups`` are read).
        query: (B, H, Lq, d).
        key: (B, H_kv, Lk, d).
        value: (B, H_kv, Lk, d_v).
        attention_mask: None, or a 4D boolean / additive mask from the mask function.
        dropout: Attention dropout (training only).
        scaling: Logit scale (sdpa's default ``d ** -0.5`` when None).
        sliding_window: The layer's window (None for a full-attention layer).
        **kwargs: Passed to ``sdpa_attention_forward`` (``is_causal``, ``softcap`` -> refused there, ...).

    Returns:
        ``(output (B, Lq, H, d_v), None)``.
    """
    q_len, k_len = query.shape[2], key.shape[2]
    causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", True)) if causal is None else bool(causal)
    if not sliding_window or not causal or k_len <= sliding_window or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    rest = {k: v for k, v in kwargs.items() if k != "is_causal"}
    offset = k_len - q_len  # query i sits at key position offset + i
    output = torch.empty(
        query.shape[0], q_len, query.shape[1], value.shape[-1], dtype=value.dtype, device=query.device
    )
    for start in range(0, q_len, sliding_window):
        stop = min(start + sliding_window, q_len)
        first_key = max(0, start + offset - sliding_window + 1)
        last_key = stop + offset  # exclusive
        q_pos = torch.arange(start + offset, stop + offset, device=query.device)[:, None]
        k_pos = torch.arange(first_key, last_key, device=query.device)[None, :]
        distance = q_pos - k_pos
        band = ((distance >= 0) & (distance < sliding_window))[None, None]  # (1, 1, c, keys)
        if attention_mask is not None:
            piece = mask_rows(attention_mask, slice(start, stop))[..., first_key:last_key]
            band = band & piece if piece.dtype == torch.bool else torch.where(band, piece, float("-inf"))
        out, _ = sdpa_attention_forward(
            module,
            query[:, :, start:stop],
            key[:, :, first_key:last_key],
            value[:, :, first_key:last_key],
            band,
            dropout=dropout,
            scaling=scaling,
            is_causal=False,
            **rest,
        )
        output[:, start:stop] = out
    return output, None


def banded_mask(
    *args,
    mask_function=None,
    local_size: int | None = None,
    attention_mask: torch.Tensor | None = None,
    allow_is_causal_skip: bool = True,
    **kwargs,
):
    """``sdpa_mask``, except None for a sliding-window layer of an unpadded batch (see the module docstring).

    None is returned only when ``mask_function`` is verifiably the plain causal band of width ``local_size``
    (probed at its edges, `is_causal_band`) and nothing else was overlaid (``allow_is_causal_skip``), so chunked or
    bidirectional local masks, which transformers also sizes with ``local_size``, still get a real mask.
    """
    unpadded = attention_mask is None or bool(attention_mask.all())
    if local_size and unpadded and allow_is_causal_skip and is_causal_band(mask_function, local_size):
        return None
    return sdpa_mask(
        *args,
        mask_function=mask_function,
        local_size=local_size,
        attention_mask=attention_mask,
        allow_is_causal_skip=allow_is_causal_skip,
        **kwargs,
    )


def register() -> str:
    """Registers the attention and mask functions with transformers (idempotent); returns the name."""
    AttentionInterface.register(BANDED, banded_attention_forward)
    AttentionMaskInterface.register(BANDED, banded_mask)
    return BANDED


register()
