"""Which keys a query may attend to, and the entropy of attention rows: the one implementation of each.

Used by `tasks.layer_probe` (entropy recorded from logits), `attention_entropy` (entropy of given
probability maps), SelfExtend and the ``chunked`` attention backend (masks when the model passed no 4D mask).

Attendable keys of query row i (its key position q_i) for key j::

    causal:            j <= q_i
    sliding window w:  q_i - j < w          (causal only: w keys including the query's own)
    padding:           key_mask[b, j] == 1
    bidirectional:     every key (then only padding applies)

Attention entropy of head h, for query row i with attendable keys K_i and probabilities p_ij::

    H_i      = -sum_{j in K_i} p_ij ln p_ij                  (nats, 0 ln 0 = 0)
    H_i^norm = H_i / ln |K_i|                                (1 = uniform over K_i, 0 = one-hot)
    entropy  = mean over real query rows i of H_i  (or of H_i^norm)

Decisions and gotchas:

- The mask is built from transformers' mask functions (``causal_mask_function``,
  ``sliding_window_causal_mask_function``, ``padding_mask_function``, ``and_masks``), evaluated on broadcast
  index tensors as ``sdpa_mask`` does without vmap, so it is the pattern transformers builds for the same
  settings. A window of None or 0 means no window; a window is ignored for bidirectional attention.
  Bidirectional means no rule at all (``and_masks()`` is all True), not ``bidirectional_mask_function``,
  which would also drop query positions < 0 (more queries than keys).
- Query rows are given as key positions: with fewer queries than keys (a KV cache) query t of Lq sits at
  ``Lk - Lq + t`` (bottom-right alignment, transformers' convention).
- A 4D mask the model built (boolean True = attend, or additive float) always wins over the rule:
  `mask_allows` reads it (additive: above half the dtype's minimum). A mask with one query row, (B, 1, 1, Lk)
  (NV-Embed's bidirectional key padding), holds for every row: `mask_rows` expands it instead of slicing.
- `entropy` takes the log-probabilities when the caller has them (``log_softmax`` of logits): ``ln`` of a
  rounded probability loses precision for small p. Without them it uses ``xlogy(p, p)``. The two forms agree
  to rounding, not bit for bit. `logit_entropy` starts from logits (the layerwise recorder) and never forms
  p or ln p: with ``s = l - max l`` over the attendable keys and ``Z = sum exp(s)``, ``H = ln Z - sum
  exp(s) s / Z``, three passes over the logits instead of eight, in place.
- `attention_entropy` computes in ``dtype`` (float32 by default) whatever the input dtype; probabilities of
  keys that are not attendable are set to 0 first, so padding may hold anything, even NaN. Real query rows
  default to ``attention_mask`` at their positions; pass ``query_mask`` to override (e.g. an echo pooling
  span). ``normalized=True`` also skips rows with a single attendable key (entropy 0 by construction); a
  sequence with no usable row gets NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from transformers.masking_utils import (
    and_masks,
    causal_mask_function,
    padding_mask_function,
    sliding_window_causal_mask_function,
)

__all__ = [
    "attendable",
    "attention_entropy",
    "entropy",
    "logit_entropy",
    "mask_allows",
    "mask_function",
    "mask_rows",
]


def mask_function(
    *, causal: bool, sliding_window: int | None = None, key_mask: torch.Tensor | None = None
) -> Callable:
    """transformers-style ``(batch_idx, head_idx, q_idx, kv_idx) -> bool`` for the rule above.

    Args:
        causal: Keys after the query position are not attendable.
        sliding_window: Keys at least this far behind the query are not attendable (causal only; None or
            0: no window).
        key_mask: (B, >= Lk) 1 for real keys; None means every key is real.
    """
    rules = []
    if causal:
        rules.append(
            sliding_window_causal_mask_function(sliding_window) if sliding_window else causal_mask_function
        )
    if key_mask is not None:
        rules.append(padding_mask_function(key_mask.bool()))
    return and_masks(
        *rules
    )  # no rule: every key (transformers' bidirectional rule drops query positions < 0)


def attendable(
    n_keys: int,
    queries: slice,
    *,
    causal: bool,
    sliding_window: int | None = None,
    key_mask: torch.Tensor | None = None,
    device: torch.device | str | None = None,
    keys: slice | None = None,
) -> torch.Tensor:
    """Which keys each query row may attend to (the rule in the module docstring).

    Args:
        n_keys: Lk.
        queries: Key positions of the query rows, ``slice(start, stop)`` (step 1); all of them:
            ``slice(Lk - Lq, Lk)``.
        causal: Keys after the query position are not attendable.
        sliding_window: Causal sliding window (None or 0: none).
        key_mask: (B, >= Lk) 1 for real keys; None means every key is real.
        device: Where to build the mask; defaults to ``key_mask``'s device (else the CPU).
        keys: Only these key positions, ``slice(first, stop)`` with both set (step 1); default all ``Lk``.

    Returns:
        (B, 1, c, k) bool, c = number of query rows, k = number of keys (B = 1 without ``key_mask``); may be
        an expanded view.
    """
    if device is None:
        device = key_mask.device if key_mask is not None else torch.device("cpu")
    if key_mask is not None:
        key_mask = key_mask.to(device)
    batch = 1 if key_mask is None else key_mask.shape[0]
    q_idx = torch.arange(queries.start, queries.stop, device=device)
    keys = slice(0, n_keys) if keys is None else keys
    kv_idx = torch.arange(keys.start, keys.stop, device=device)
    allowed = mask_function(causal=causal, sliding_window=sliding_window, key_mask=key_mask)(
        torch.arange(batch, device=device)[:, None, None, None],
        torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device),
        q_idx[None, None, :, None],
        kv_idx[None, None, None, :],
    )
    return allowed.expand(batch, 1, q_idx.numel(), kv_idx.numel())


def mask_rows(mask: torch.Tensor, rows: slice) -> torch.Tensor:
    """Query rows ``rows`` of a 4D mask (B|1, 1|H, Lq|1, Lk), as a view with ``rows``' length in dim 2.

    A mask with one query row (a bidirectional key-padding mask, (B, 1, 1, Lk)) holds for every row, so it is
    expanded rather than sliced.
    """
    if mask.shape[-2] == 1:
        n_rows = len(range(rows.start or 0, rows.stop, rows.step or 1))
        return mask.expand(*mask.shape[:-2], n_rows, mask.shape[-1])
    return mask[:, :, rows]


def mask_allows(mask: torch.Tensor) -> torch.Tensor:
    """A 4D attention mask as booleans (True = attend): boolean masks as they are, additive float masks
    where the bias is above half the dtype's minimum (transformers fills masked pairs with the minimum)."""
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2


def entropy(probs: torch.Tensor, log_probs: torch.Tensor | None = None) -> torch.Tensor:
    """Shannon entropy ``-sum p ln p`` (nats) over the last dimension, with 0 ln 0 = 0.

    Args:
        probs: Probabilities, 0 where a key is not attendable.
        log_probs: ``ln probs`` when known exactly (``log_softmax`` output, -inf where p = 0).

    Returns:
        ``probs.shape[:-1]``.
    """
    if log_probs is None:
        return -torch.xlogy(probs, probs).sum(dim=-1)
    return -(probs * log_probs.nan_to_num(neginf=0.0)).sum(dim=-1)


def logit_entropy(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of ``softmax(logits)`` over the attendable keys, without forming p.

    Args:
        logits: (..., keys) float; overwritten (it ends as ``exp(s) s``).
        allowed: Boolean, broadcastable to ``logits``: the attendable keys.

    Returns:
        ``logits.shape[:-1]``. Keys that are not attendable get the dtype's minimum, not -inf, so ``exp(s) s``
        is 0 there, not NaN; a row with no attendable key gets ``ln`` of the number of keys (callers drop it).
    """
    logits.masked_fill_(~allowed, torch.finfo(logits.dtype).min)
    logits.sub_(logits.amax(dim=-1, keepdim=True))  # s <= 0
    weights = logits.exp()
    total = weights.sum(dim=-1)
    return total.log() - logits.mul_(weights).sum(dim=-1) / total


def attention_entropy(
    attn_probs: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    normalized: bool = False,
    causal: bool = False,
    query_mask: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Mean Shannon entropy (nats) of the attention rows of each head.

    Args:
        attn_probs: (B, heads, Lq, Lk) post-softmax attention weights of one layer.
        attention_mask: (B, Lk) 1 for real keys; None means all keys are real.
        normalized: Divide each row's entropy by ln(number of attendable keys of that row).
        causal: Keys after the query position are not attendable.
        query_mask: (B, Lq) real query rows; defaults to ``attention_mask[:, Lk - Lq:]`` (all rows if None).
        dtype: Computation dtype.

    Returns:
        (B, heads) tensor; NaN for a sequence with no usable query row.
    """
    if attn_probs.dim() != 4:
        raise ValueError(f"attn_probs must be (B, heads, Lq, Lk), got shape {tuple(attn_probs.shape)}")
    B, _, Lq, Lk = attn_probs.shape
    device = attn_probs.device
    key_mask = (
        torch.ones(B, Lk, dtype=torch.bool, device=device) if attention_mask is None else attention_mask
    )
    if query_mask is None:
        query_mask = (
            key_mask[:, Lk - Lq :] if Lq <= Lk else torch.ones(B, Lq, dtype=torch.bool, device=device)
        )
    att = attendable(
        Lk, slice(Lk - Lq, Lk), causal=causal, key_mask=key_mask, device=device
    )  # (B, 1, Lq, Lk)
    p = torch.where(att, attn_probs.to(dtype), torch.zeros((), dtype=dtype, device=device))
    ent = entropy(p)  # (B, heads, Lq)
    n_att = att.sum(dim=-1).squeeze(1)  # (B, Lq)
    rows = query_mask.bool().to(device) & (n_att >= (2 if normalized else 1))  # (B, Lq)
    if normalized:
        ent = ent / torch.log(n_att.clamp(min=2).to(dtype)).unsqueeze(1)
    keep = rows.unsqueeze(1)  # (B, 1, Lq)
    ent = torch.where(keep, ent, torch.zeros((), dtype=dtype, device=device))  # padding rows may be NaN
    n_rows = keep.sum(dim=-1).to(dtype)  # (B, 1)
    mean = ent.sum(dim=-1) / n_rows.clamp(min=1)  # (B, heads)
    return torch.where(n_rows > 0, mean, torch.full_like(mean, math.nan))
