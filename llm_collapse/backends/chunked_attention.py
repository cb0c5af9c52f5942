"""Memory-linear exact attention that honours Gemma 2's logit softcap: ``attn_implementation="chunked"``.

Why
    transformers 5.24 runs Gemma 2 (``attn_logit_softcapping``) only with its eager attention: sdpa and flash
    cannot apply ``tanh(x / c) * c`` to the logits. Eager materialises (B, heads, L, L) logits (and a
    softmax copy of the same size), 64 GiB per tensor for bge-multilingual-gemma2 (16 heads) at
    32k tokens, so long inputs are infeasible. This module computes the same function query chunk by query
    chunk: at most ``_MAX_CHUNK_ELEMENTS`` float32 logits (and at most ``_MAX_QUERY_CHUNK`` query rows)
    live at a time, O(L x chunk); scaling, softcap, mask and softmax run in place on that one tensor
    (out of place when autograd needs the inputs).

What it computes (per query chunk, exactly eager's order of operations)
    ``logits = (q @ k^T) * scaling``; ``tanh(logits / softcap) * softcap`` when a softcap is given; the mask
    (boolean: masked logits set to the float32 minimum; additive float: added); softmax in float32, cast
    to the value dtype; dropout (training only); ``probs @ v``. ``q @ k^T`` runs in the input dtype like
    eager (tensor cores for bf16) and everything after it in float32, so bf16 results are at least as
    accurate as eager's and fp32 results match eager to rounding. Grouped-query heads share their
    key/value head without a ``repeat_kv`` copy: a chunk's query heads of one key/value head are stacked as
    the rows of one matmul (broadcasting k over a repeat dimension would make torch.matmul copy it per
    chunk).

Masks
    - 4D ``(B or 1, 1 or heads, Lq, Lk)`` boolean (True = attend) or additive float: sliced per chunk, so
      every pattern transformers builds (causal, sliding window, bidirectional, padding) is honoured.
    - None: causal (``module.is_causal``, or an ``is_causal`` kwarg) with ``sliding_window`` when given,
      else full attention; a 2D (B, Lk) key padding mask is combined with that (`metrics.attention.attendable`,
      shared with SelfExtend and the layerwise entropy recorder).
    - When queries are fewer than keys (a KV cache), query i sits at key position ``Lk - Lq + i``
      (bottom-right alignment, as transformers' masks do).
    Fully masked query rows (padding) attend uniformly instead of producing NaN; pooling never reads them.

Mask function (memory linear in L)
    The registered mask function is `llm_collapse.backends.mask_patterns.lean_mask`: for transformers' plain
    patterns (causal, causal sliding window, bidirectional) it passes None (unpadded) or the (B, Lk) key
    padding, and the rule is applied per chunk from positions, so no (B, 1, L, L) mask exists (it was 1 GiB per
    text at 32k tokens for Gemma 2's sliding layers). Any other pattern (overlays, packed sequences, a KV cache)
    gets transformers' boolean ``sdpa_mask``. Wrappers that read the mask (`routed_attention` interventions)
    handle None and 2D masks with the same rule (`metrics.attention.attendable`). A 4D mask with one query row
    (NV-Embed's (B, 1, 1, Lk) key padding under another implementation) holds for every row.

Registration and naming
    Registered on import under ``"chunked"`` in ``AttentionInterface`` and ``AttentionMaskInterface``;
    `ATTN_IMPLEMENTATIONS` is the one place that maps user-facing names to registered names (identity
    today). The registered name must stay free of "sdpa"/"flash"/"flex" (transformers dispatches checks on
    those substrings) and of the ``llm_collapse_`` prefix (SelfExtend refuses models whose attention is
    already routed through such a name). Because the name is the user-facing one, ``from_pretrained``
    accepts it directly and ``load_embedder(..., attn_implementation="chunked")`` needs nothing but this
    module imported (see the import in ``llm_collapse/backends/hf.py``). Interventions that route attention
    (`routed_attention`) wrap it like any other registered implementation.
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from llm_collapse.backends.mask_patterns import lean_mask
from llm_collapse.metrics.attention import attendable, mask_rows

logger = logging.getLogger(__name__)

__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "CHUNKED",
    "chunked_attention_forward",
    "query_chunk_size",
    "register",
    "registered_name",
]

CHUNKED = "chunked"
"""User-facing name (``load_embedder(..., attn_implementation="chunked")``)."""

ATTN_IMPLEMENTATIONS: dict[str, str] = {CHUNKED: CHUNKED}
"""User-facing name -> name registered with transformers (the only place the mapping lives)."""

# Most query rows per chunk, and most logits per chunk tensor (float32): 2**26 elements = 256 MiB.
_MAX_QUERY_CHUNK = 1024
_MAX_CHUNK_ELEMENTS = 1 << 26


def registered_name(name: str) -> str:
    """The transformers ``attn_implementation`` for a user-facing name (other names pass through)."""
    return ATTN_IMPLEMENTATIONS.get(name, name)


def query_chunk_size(batch: int, heads: int, keys: int) -> int:
    """Query rows per chunk: at most ``_MAX_QUERY_CHUNK`` and at most ``_MAX_CHUNK_ELEMENTS`` logits."""
    return max(1, min(_MAX_QUERY_CHUNK, _MAX_CHUNK_ELEMENTS // max(1, batch * heads * keys)))


def chunked_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Exact (softcapped) attention, one query chunk at a time; transformers' attention-function signature.

    Args:
        module: The calling attention module (``is_causal``, ``head_dim``, ``training`` are read).
        query: (B, H, Lq, d).
        key: (B, H_kv, Lk, d); H must be a multiple of H_kv.
        value: (B, H_kv, Lk, d_v).
        attention_mask: 4D boolean (True = attend) or additive float mask, a 2D (B, Lk) key padding mask,
            or None (see the module docstring).
        dropout: Attention-probability dropout, applied only when ``module.training``.
        scaling: Logit scale; defaults to ``module.head_dim ** -0.5`` like eager.
        softcap: Gemma 2's ``c``: logits become ``tanh(logits / c) * c`` before the mask.
        sliding_window: Used only without a 4D mask (a 4D mask already encodes the window).
        is_causal: Overrides ``module.is_causal``; used only without a 4D mask.
        **kwargs: Whatever else the module passes (position ids, ...); ignored.

    Returns:
        ``(output (B, Lq, H, d_v), None)`` like ``eager_attention_forward`` (no attention weights).
    """
    batch, heads, q_len, head_dim = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    if heads % kv_heads:
        raise ValueError(
            f"chunked attention: {heads} query heads are not a multiple of {kv_heads} key/value heads"
        )
    if scaling is None:
        scaling = float(getattr(module, "head_dim", head_dim)) ** -0.5
    causal = bool(getattr(module, "is_causal", True)) if is_causal is None else bool(is_causal)
    n_rep = heads // kv_heads
    offset = k_len - q_len  # bottom-right alignment of queries against keys
    mask_4d = attention_mask is not None and attention_mask.dim() == 4
    # In-place elementwise ops keep ~2 chunk tensors alive; autograd needs the out-of-place versions.
    inplace = not (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad))
    fill = torch.finfo(torch.float32).min

    k_t = key.transpose(-1, -2)  # (B, H_kv, d, Lk)
    output = torch.empty(batch, heads, q_len, value.shape[-1], dtype=value.dtype, device=query.device)
    chunk = query_chunk_size(batch, heads, k_len)
    for start in range(0, q_len, chunk):
        stop = min(start + chunk, q_len)
        c = stop - start
        # Head h = kv * n_rep + r (repeat_kv's order): fold n_rep into the rows, so one batched matmul per
        # key/value head serves its query heads without expanding k or v.
        q = query[:, :, start:stop].reshape(batch, kv_heads, n_rep * c, head_dim)  # (B, H_kv, n_rep*c, d)
        logits = torch.matmul(q, k_t).view(batch, heads, c, k_len).float()  # (B, H, c, Lk)
        if inplace:
            logits.mul_(scaling)
            if softcap is not None:
                logits.div_(softcap).tanh_().mul_(softcap)
        else:
            logits = logits * scaling
            if softcap is not None:
                logits = torch.tanh(logits / softcap) * softcap
        if mask_4d:
            mask = mask_rows(attention_mask, slice(start, stop))[..., :k_len]  # (B|1, 1|H, c, Lk)
            mask = mask.to(query.device)
            if mask.dtype == torch.bool:
                logits = logits.masked_fill_(~mask, fill) if inplace else logits.masked_fill(~mask, fill)
            else:
                logits = logits.add_(mask) if inplace else logits + mask.float()
        elif causal or attention_mask is not None:
            allowed = attendable(
                k_len,
                slice(start + offset, stop + offset),
                causal=causal,
                sliding_window=sliding_window,
                key_mask=attention_mask,
                device=query.device,
            )  # (B|1, 1, c, Lk)
            logits = logits.masked_fill_(~allowed, fill) if inplace else logits.masked_fill(~allowed, fill)
        probs = _softmax_(logits) if inplace else torch.softmax(logits, dim=-1, dtype=torch.float32)
        del logits
        probs = probs.to(value.dtype)
        if dropout and module.training:
            probs = nn.functional.dropout(probs, p=dropout, training=True)
        out = torch.matmul(probs.view(batch, kv_heads, n_rep * c, k_len), value)  # (B, H_kv, n_rep*c, d_v)
        del probs
        output[:, :, start:stop] = out.view(batch, heads, c, -1)
    return output.transpose(1, 2).contiguous(), None


def _softmax_(logits: torch.Tensor) -> torch.Tensor:
    """Float32 softmax over the last dimension, in place (one chunk tensor alive instead of two).

    A row whose logits are all the fill value (fully masked) becomes uniform, as with ``torch.softmax``.
    """
    logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_()
    return logits.div_(logits.sum(dim=-1, keepdim=True))


def register() -> str:
    """Registers the attention and mask functions with transformers (idempotent); returns the name."""
    name = registered_name(CHUNKED)
    AttentionInterface.register(name, chunked_attention_forward)
    AttentionMaskInterface.register(name, lean_mask)
    return name


register()
