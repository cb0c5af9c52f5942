"""Pooling token states into one vector per text, reading only positions where ``pool_mask`` is 1.

Both poolings accumulate in fp32 whatever the model dtype. Last-token pooling takes the last position
whose mask is 1, so it is correct for left and right padding alike.

The names of the poolings (`llm_collapse.adapters.spec.POOLINGS`) live with the spec, so that spec files and
the command lines' help read them without torch.
"""

from __future__ import annotations

import torch

from llm_collapse.adapters.spec import POOLINGS, Pooling


def last_token_pool(hidden: torch.Tensor, pool_mask: torch.Tensor) -> torch.Tensor:
    """(B, L, H), (B, L) -> (B, H): the state at the last position where ``pool_mask`` is 1."""
    positions = torch.arange(pool_mask.shape[1], device=pool_mask.device)
    last = (positions * pool_mask.bool()).argmax(dim=1)  # (B,)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()


def mean_pool(hidden: torch.Tensor, pool_mask: torch.Tensor) -> torch.Tensor:
    """(B, L, H), (B, L) -> (B, H): the fp32 mean over positions where ``pool_mask`` is 1."""
    mask = pool_mask.to(device=hidden.device, dtype=torch.float32).unsqueeze(-1)  # (B, L, 1)
    total = torch.bmm(mask.transpose(1, 2), hidden.float()).squeeze(1)  # (B, H)
    return total / mask.sum(dim=1).clamp(min=1.0)


def pool(hidden: torch.Tensor, pool_mask: torch.Tensor, mode: Pooling) -> torch.Tensor:
    if mode == "last":
        return last_token_pool(hidden, pool_mask)
    if mode == "mean":
        return mean_pool(hidden, pool_mask)
    raise ValueError(f"Unknown pooling {mode!r}; allowed: {', '.join(POOLINGS)}")
