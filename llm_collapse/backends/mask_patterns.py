"""Recognising transformers' plain mask patterns, so attention functions can skip the (B, 1, L, L) mask.

Why
    transformers' mask interface hands every mask function a ``mask_function`` plus the 2D padding mask and asks for
    a dense (B, 1, Lq, Lk) mask (``sdpa_mask``): 1 GiB per text at 32k tokens, built once per layer type and
    forward. For the three patterns our models use (causal, causal sliding window, bidirectional; each with key
    padding) the attention functions of this package can apply the rule themselves from positions, so the mask
    functions here pass on only what the rule cannot know: nothing, or the (B, Lk) key padding.

Recognition (exact or refused)
    - causal: ``mask_function is causal_mask_function``; bidirectional: ``is bidirectional_mask_function``.
      transformers wraps the base function (``and_masks``/``or_masks``) for every overlay (packed sequences, block
      overlays, image tokens), so an identity match means no overlay.
    - sliding window ``w``: transformers passes ``local_size=w`` and a closure; it is accepted when it allows
      exactly ``0 <= q - k < w`` at the band's edges (`is_causal_band`), no overlay was added (overlays clear
      ``allow_is_causal_skip`` and set ``use_vmap``), and the call has no offsets (no KV cache).
    - Anything else gets ``None`` from `plain_pattern`, and the caller builds transformers' own mask.

Padding
    `padding_keys` is the (B, Lk) boolean of real keys, or None when every key is real (``.all()`` syncs once per
    mask on CUDA, as ``sdpa_mask`` does). transformers' padding rule masks keys only: padded *query* rows still
    attend to the real keys (their outputs are never pooled).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.masking_utils import (
    bidirectional_mask_function,
    causal_mask_function,
    prepare_padding_mask,
    sdpa_mask,
)

__all__ = ["MaskPattern", "is_causal_band", "lean_mask", "padding_keys", "plain_pattern"]


@dataclass(frozen=True)
class MaskPattern:
    """A plain pattern: causal (with an optional window of ``window`` keys, the query's own included) or not."""

    causal: bool
    window: int | None = None


def is_causal_band(mask_function, window: int) -> bool:
    """Whether ``mask_function`` allows exactly ``0 <= q - k < window`` at the band's edges."""
    if mask_function is None:
        return False
    t = lambda v: torch.tensor(v)  # noqa: E731
    probes = {  # (q, k): allowed
        (0, 0): True,
        (0, 1): False,
        (window - 1, 0): True,
        (window, 0): False,
        (2 * window, window + 1): True,
        (2 * window, 2 * window + 1): False,
    }
    try:
        return all(bool(mask_function(t(0), t(0), t(q), t(k))) == ok for (q, k), ok in probes.items())
    except Exception:  # noqa: BLE001 - an unknown mask function just gets the real mask
        return False


def plain_pattern(
    mask_function,
    *,
    q_length: int | None = None,
    kv_length: int | None = None,
    local_size: int | None = None,
    allow_is_causal_skip: bool = True,
    use_vmap: bool = False,
    q_offset: int = 0,
    kv_offset: int = 0,
    **_,
) -> MaskPattern | None:
    """The plain pattern ``mask_function`` encodes, or None when it is anything else (module docstring).

    Takes a mask interface's keyword arguments. A causal pattern also needs ``q_length == kv_length`` when both
    are given (the package's functions align queries bottom-right, transformers' rule only equals that then;
    bidirectional rows do not depend on the query position).
    """
    if use_vmap or not (isinstance(q_offset, int) and isinstance(kv_offset, int)) or q_offset or kv_offset:
        return None
    if mask_function is bidirectional_mask_function:
        return MaskPattern(causal=False)
    if q_length != kv_length:
        return None
    if mask_function is causal_mask_function:
        return MaskPattern(causal=True)
    if local_size and allow_is_causal_skip and is_causal_band(mask_function, local_size):
        return MaskPattern(causal=True, window=int(local_size))
    return None


def padding_keys(
    attention_mask: torch.Tensor | None, kv_length: int, kv_offset: int = 0
) -> torch.Tensor | None:
    """(B, Lk) boolean, True for real keys; None when there is no padding."""
    keys = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if keys is None or bool(keys.all()):
        return None
    return keys.bool()


def lean_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    mask_function=causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor | None:
    """A mask function for attention functions that apply the rule themselves (``chunked``).

    Returns None (unpadded) or the (B, Lk) key padding mask for a plain pattern, so memory stays linear in L;
    transformers' ``sdpa_mask`` (boolean (B, 1, Lq, Lk)) for anything else.
    """
    if plain_pattern(mask_function, q_length=q_length, kv_length=kv_length, **kwargs) is not None:
        return padding_keys(attention_mask, kv_length)
    return sdpa_mask(
        batch_size, q_length, kv_length, mask_function=mask_function, attention_mask=attention_mask, **kwargs
    )
