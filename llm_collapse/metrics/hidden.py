"""Diagnostics from token hidden states (torch tensors in, floats out); attention maps: `metrics.attention`.

Use them on the per-layer states of the same forward pass that produced the embeddings
(``Embedder.iter_batches(..., output_hidden_states=True)``). The frequency view follows anchors §1.5:
self-attention acts as a low-pass filter, so deeper layers and longer inputs keep mostly the DC
component (the mean token).

High-frequency energy ratio of one sequence X (n real tokens, (n, H))::

    DC[X] = (1/n) 1 1^T X            (the mean token at every position)
    HC[X] = X - DC[X]
    r_HF  = ||HC[X]||_F^2 / ||X||_F^2   in [0, 1]

Decisions and gotchas:

- Everything is computed in ``dtype`` (float32 by default, float64 on request) whatever the input dtype;
  masked positions are filled with 0 before use, so padding may hold anything, even NaN.
- r_HF subtracts the mean explicitly instead of using ``||X||^2 - n ||mean||^2``, which cancels
  catastrophically exactly when collapse makes r_HF small.
- r_HF needs >= 2 real tokens (a single token is its own mean, giving a spurious 0): fewer gives NaN
  and a warning; an all-zero sequence also gives NaN.
- Decoder models put a massive-norm "attention sink" state on the first token, which can dominate
  ||X||_F^2. To study the rest, pass a mask with that position zeroed (any (B, L) mask works).
- ``layerwise_high_frequency`` returns one row per entry of ``hidden_states``; for Hugging Face outputs
  row 0 is the embedding layer, row l the output of block l.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

logger = logging.getLogger(__name__)


def _batched(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, H) or (L, H) states and an optional mask -> (B, L, H) states and a (B, L) bool mask."""
    if hidden.dim() == 2:
        hidden = hidden.unsqueeze(0)
        if attention_mask is not None and attention_mask.dim() == 1:
            attention_mask = attention_mask.unsqueeze(0)
    if hidden.dim() != 3:
        raise ValueError(f"hidden must be (B, L, H) or (L, H), got shape {tuple(hidden.shape)}")
    if attention_mask is None:
        attention_mask = torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
    if tuple(attention_mask.shape) != tuple(hidden.shape[:2]):
        raise ValueError(f"mask shape {tuple(attention_mask.shape)} != (B, L) = {tuple(hidden.shape[:2])}")
    return hidden, attention_mask.to(device=hidden.device).bool()


def high_frequency_energy_ratio(
    hidden: torch.Tensor, attention_mask: torch.Tensor | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Per-sequence share of the token-state energy outside the mean token.

    Args:
        hidden: (B, L, H) or (L, H) token states of one layer.
        attention_mask: (B, L) (or (L,)) 1 for real tokens; None means all tokens are real.
        dtype: Computation dtype.

    Returns:
        (B,) tensor of ``||X - mean(X)||_F^2 / ||X||_F^2`` over each sequence's real tokens ((1,) for a
        2-D input); NaN where a sequence has < 2 real tokens or zero energy.
    """
    hidden, mask = _batched(hidden, attention_mask)
    m = mask.unsqueeze(-1)  # (B, L, 1)
    X = torch.where(m, hidden.to(dtype), torch.zeros((), dtype=dtype, device=hidden.device))  # (B, L, H)
    n_real = mask.sum(dim=1)  # (B,)
    mean = X.sum(dim=1) / n_real.clamp(min=1).unsqueeze(-1).to(dtype)  # (B, H)
    centred = torch.where(
        m, X - mean.unsqueeze(1), torch.zeros((), dtype=dtype, device=X.device)
    )  # (B, L, H)
    high = centred.pow(2).sum(dim=(1, 2))  # (B,)
    total = X.pow(2).sum(dim=(1, 2))  # (B,)
    short = n_real < 2
    if bool(short.any()):
        logger.warning(
            "high_frequency_energy_ratio: sequences %s have < 2 real tokens; NaN",
            short.nonzero().flatten().tolist(),
        )
    bad = short | (total <= 0)
    return torch.where(
        bad, torch.full_like(total, float("nan")), high / total.clamp(min=torch.finfo(dtype).tiny)
    )


def length_free_hf_ratio(ratio: np.ndarray, n_tokens: np.ndarray) -> np.ndarray:
    """``ratio x n / (n - 1)``: the high-frequency energy ratio with its pure length effect removed.

    With n real tokens ``x_t = mu + e_t`` (e_t i.i.d., total variance s^2), E||X - mean||^2 = (n - 1) s^2 and
    E||X||^2 = n (||mu||^2 + s^2), so the raw ratio's expectation is ((n - 1) / n) s^2 / (||mu||^2 + s^2):
    it rises with n for the same token distribution (more frequency bins, one of them DC). The factor
    n / (n - 1) leaves s^2 / (||mu||^2 + s^2), which does not depend on n. NaN where n < 2.
    """
    n = np.asarray(n_tokens, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n >= 2, np.asarray(ratio, dtype=np.float64) * n / (n - 1), np.nan)


def layerwise_high_frequency(
    hidden_states: Sequence[torch.Tensor], attention_mask: torch.Tensor | None = None
) -> np.ndarray:
    """``high_frequency_energy_ratio`` for every layer.

    Args:
        hidden_states: Per-layer (B, L, H) tensors, e.g. a Hugging Face ``output.hidden_states``.
        attention_mask: (B, L) 1 for real tokens.

    Returns:
        (n_layers, B) float64 array (n_layers = len(hidden_states)).
    """
    rows = [high_frequency_energy_ratio(h, attention_mask).double().cpu().numpy() for h in hidden_states]
    return np.stack(rows) if rows else np.zeros((0, 0))
