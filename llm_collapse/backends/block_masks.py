"""flex_attention ``BlockMask``s for the plain patterns, computed from block positions (never from an L x L mask).

Why not ``create_block_mask``
    torch's ``create_block_mask`` evaluates the mask function at every (query, key) pair: uncompiled that is a
    dense (B, 1, L, L) boolean (10 GiB peak at 32k tokens on the CPU), compiled it is a fresh compile per shape,
    and each distinct mask function adds entries to dynamo's per-function recompile limit (past it torch silently
    runs flex unfused, which materialises every score). For causal / sliding-window / bidirectional attention
    with contiguous key padding (what `Embedder` batches hold: left or right padding) the block structure follows
    from each block's first and last position, so it is computed here in O((L / 128)^2) memory.

What the mask holds
    Blocks of ``BLOCK`` x ``BLOCK`` (torch's default sparse block size). A block is *full* when every pair in it is
    allowed (the kernel skips ``mask_mod`` there), *partial* when some are (``mask_mod`` decides per pair), and
    left out when none are, so sliding-window layers compute only their band and padded key blocks are skipped.
    Key blocks that run past the last key are never full, so ``mask_mod`` bounds them.

``mask_mod`` is one function for every pattern: real keys ``lo[b] <= k < hi[b]``, and for causal layers
``k <= q`` and ``q - k < window``. Its parameters are captured tensors, never Python numbers, so a new length,
window or batch size reuses the compiled kernel (dynamo specialises on closure numbers, and a captured float that
changes becomes a symbolic value the CPU backend fails to lower).
"""

from __future__ import annotations

import math

import torch
from torch.nn.attention.flex_attention import BlockMask

from llm_collapse.backends.mask_patterns import MaskPattern

__all__ = ["BLOCK", "contiguous_key_span", "pattern_block_mask"]

BLOCK = 128
_NO_WINDOW = 1 << 62


def contiguous_key_span(
    keys: torch.Tensor | None, batch: int, kv_length: int, device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(lo, hi), each (B,) int64: the real keys of row b are ``lo[b] <= k < hi[b]``; None if a row is not one run.

    Args:
        keys: (B, Lk) boolean real keys, or None (every key is real).
        batch: B (used when ``keys`` is None).
        kv_length: Lk.
        device: Where to put the result.
    """
    if keys is None:
        lo = torch.zeros(batch, dtype=torch.long, device=device)
        return lo, torch.full((batch,), kv_length, dtype=torch.long, device=device)
    keys = keys.to(device=device, dtype=torch.bool)
    index = torch.arange(kv_length, device=device)
    lo = torch.where(keys, index, kv_length).amin(-1)  # (B,)
    hi = torch.where(keys, index, -1).amax(-1) + 1  # (B,)
    hi = torch.maximum(hi, lo)  # a row without any real key: the empty span [Lk, Lk)
    if not bool((keys.sum(-1) == hi - lo).all()):
        return None
    return lo, hi


def pattern_block_mask(
    pattern: MaskPattern,
    span: tuple[torch.Tensor, torch.Tensor],
    q_length: int,
    kv_length: int,
    *,
    with_q_blocks: bool = False,
) -> BlockMask:
    """The ``BlockMask`` of ``pattern`` with real keys ``span`` (from `contiguous_key_span`).

    Args:
        pattern: Causal (with optional window) or bidirectional.
        span: (lo, hi), each (B,), on the device the kernel runs on.
        q_length: Lq (queries at positions ``0..Lq-1``: no KV cache).
        kv_length: Lk.
        with_q_blocks: Also build the transposed (query-major) indices, which only the backward pass reads.
    """
    lo, hi = span
    device = lo.device
    n_q, n_k = math.ceil(q_length / BLOCK), math.ceil(kv_length / BLOCK)
    q_first = torch.arange(n_q, device=device)[:, None] * BLOCK  # (nQ, 1)
    q_last = torch.clamp(q_first + BLOCK - 1, max=q_length - 1)
    k_first = torch.arange(n_k, device=device)[None, :] * BLOCK  # (1, nK)
    k_last = torch.clamp(k_first + BLOCK - 1, max=kv_length - 1)
    full = (k_first + BLOCK <= kv_length).expand(n_q, n_k)  # tail key blocks stay partial
    some = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if pattern.causal:
        full = full & (k_last <= q_first)
        some = some & (k_first <= q_last)
        if pattern.window:
            full = full & (q_last - k_first < pattern.window)
            some = some & (q_first - k_last < pattern.window)
    lo_, hi_ = lo[:, None, None], hi[:, None, None]  # (B, 1, 1)
    full = full[None] & (lo_ <= k_first[None]) & (k_last[None] < hi_)  # (B, nQ, nK)
    some = some[None] & (k_first[None] < hi_) & (k_last[None] >= lo_)
    partial = some & ~full
    kv_count, kv_index = _ordered(partial)
    full_count, full_index = _ordered(full)
    return BlockMask.from_kv_blocks(
        kv_count,
        kv_index,
        full_count,
        full_index,
        BLOCK_SIZE=BLOCK,
        mask_mod=_mask_mod(pattern, lo, hi),
        seq_lengths=(q_length, kv_length),
        compute_q_blocks=with_q_blocks,
    )


def _ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, nQ, nK) boolean -> counts (B, 1, nQ) and the selected key-block indices first (B, 1, nQ, nK), int32."""
    blocks = blocks[:, None]  # (B, 1, nQ, nK): one head dimension, broadcast over heads
    count = blocks.sum(-1, dtype=torch.int32)
    index = torch.argsort(blocks.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return count, index


def _mask_mod(pattern: MaskPattern, lo: torch.Tensor, hi: torch.Tensor):
    device = lo.device
    causal = torch.tensor(pattern.causal, device=device)
    window = torch.tensor(pattern.window or _NO_WINDOW, dtype=torch.long, device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        real = (kv_idx >= lo[b]) & (kv_idx < hi[b])
        return real & (~causal | ((kv_idx <= q_idx) & (q_idx - kv_idx < window)))

    return mask_mod
