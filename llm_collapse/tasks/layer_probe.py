"""Per-layer statistics from the same forward pass as the embeddings: the low-pass view of length collapse.

`measure_layers` runs `Embedder.iter_batches(output_hidden_states=True)` once and returns, per text, its
embedding, the high-frequency energy ratio of every layer's token states (`metrics.hidden`) and the attention
entropy of every layer. Attention weights are never materialised whole: `record_attention_entropy` routes the
attention modules through a registered function that calls the model's own attention for the output and, on
the side, recomputes the logits in query chunks (same ``scaling``, softcap and mask) to get each row's entropy
``H_i = logsumexp(l_i) - sum_j p_ij l_ij`` in nats, and ``H_i / ln |K_i|`` normalised by the number of
attendable keys (mask rule and entropy: `metrics.attention`). Entropy is averaged over a text's real query
rows and over heads.

Decisions: the leading BOS of decoders is left out of the high-frequency ratio (its attention-sink state is
identical for every text and can dominate ``||X||^2``); the recorder sees attention as the model computes it
under scaling/RoPE interventions, but not SelfExtend's merged logits (it raises if SelfExtend is active).

Speed: each query chunk's logits are computed only over the key span some row of the chunk may attend to
(a sliding-window layer's band, the causal past), which is exact (the other keys get probability 0); without
a 4D mask from the model the attendable-key mask itself is built only over that band, and the entropy comes
from the logits in three passes (`metrics.attention.logit_entropy`). Where prefix sharing is exact (`llm_collapse.encoding.prefix.sharing_groups`: causal model, nothing after the text), a text
whose input is a token prefix of another's is read from the longer forward: its hidden states and its
attention rows are the first n of the longer input's (a causal row never sees later keys, and its number of
attendable keys is the same), so the prefix design's lengths of one document cost one forward.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from llm_collapse.embedder import Embedder
from llm_collapse.encoding.prefix import pool_prefixes, sharing_groups
from llm_collapse.interventions.attention import attention_modules, layer_index, routed_attention
from llm_collapse.interventions.base import NotApplicable
from llm_collapse.metrics.attention import attendable, logit_entropy, mask_allows, mask_rows
from llm_collapse.metrics.hidden import layerwise_high_frequency

_CHUNK = 512


@dataclass
class LayerwiseResult:
    """Per-text results; layers are in model order (hidden states include the embedding output first).

    Attributes:
        embeddings: (n, d) the embeddings, exactly as `Embedder.encode` returns them.
        lengths: (n,) token counts.
        high_frequency: (n, n_layers + 1) high-frequency energy ratio per hidden-state layer.
        attention_entropy: (n, n_layers) mean attention entropy in nats.
        attention_entropy_normalized: (n, n_layers) the same divided by ln(number of attendable keys).
    """

    embeddings: np.ndarray
    lengths: np.ndarray
    high_frequency: np.ndarray
    attention_entropy: np.ndarray
    attention_entropy_normalized: np.ndarray


@contextlib.contextmanager
def record_attention_entropy(model: nn.Module) -> Iterator[dict[int, list[torch.Tensor]]]:
    """Records, per layer and forward call, (B, 2) [entropy, normalised entropy] averaged over rows and heads."""
    records: dict[int, list[torch.Tensor]] = defaultdict(list)
    state: dict[str, torch.Tensor] = {}
    layers = {id(module): layer_index(name) or 0 for name, module in attention_modules(model)}

    def remember_mask(_module, args, kwargs):
        state["mask"] = kwargs.get("attention_mask")

    def wrap(original, module):
        def recording(module, query, key, value, attention_mask, **kwargs):
            output = original(module, query, key, value, attention_mask, **kwargs)
            scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
            stats = _entropy(
                module,
                query,
                key,
                attention_mask,
                scaling,
                kwargs.get("softcap"),
                state.get("mask"),
                kwargs.get("sliding_window"),
            )
            records[layers[id(module)]].append(stats)
            return output

        return recording

    handle = model.register_forward_pre_hook(remember_mask, with_kwargs=True)
    try:
        with routed_attention(model, wrap, tag="entropy_recorder"):
            yield records
    finally:
        handle.remove()


@torch.no_grad()
def _entropy(module, query, key, mask4d, scaling, softcap, mask2d, window=None) -> torch.Tensor:
    """(B, Lq, 4) float64 CPU per query row: entropy (nats), normalised entropy, whether the row is a real
    token with an attendable key, whether it has more than one (the rows the normalised mean uses).

    The logits of a 32k full-attention layer are most of the recorder's cost: they are computed once per chunk
    and overwritten by `logit_entropy`. Grouped-query heads share their key head through a reshape of the
    queries, without copying keys.
    """
    batch, heads, length, dim = query.shape
    kv_heads, n_keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    real_keys = torch.ones(batch, n_keys, dtype=torch.bool) if mask2d is None else mask2d.bool().cpu()
    out = torch.zeros(batch, length, 4, dtype=torch.float64)
    for start in range(0, length, _CHUNK):
        stop = min(start + _CHUNK, length)
        candidates = _candidate_keys(module, mask4d, start, stop, n_keys, window)
        allowed = _allowed(module, mask4d, real_keys, start, stop, candidates, window)  # (B, 1, c, k)
        used = allowed.any(dim=(0, 1, 2)).nonzero()
        if len(used) == 0:
            continue
        first, last = int(used[0]), int(used[-1]) + 1
        span = slice(candidates.start + first, candidates.start + last)  # keys some row of the chunk may see
        allowed = allowed[..., first:last].to(query.device)
        rows = stop - start
        grouped = query[:, :, start:stop].float().reshape(batch, kv_heads, groups * rows, dim)
        logits = grouped @ key[:, :, span].float().transpose(-1, -2)  # (B, kv_heads, groups * c, span)
        logits = logits.view(batch, heads, rows, -1).mul_(scaling)
        if softcap:
            logits.div_(softcap).tanh_().mul_(softcap)
        rows_entropy = logit_entropy(logits, allowed).mean(1).double().cpu()  # (B, c)
        n_allowed = torch.count_nonzero(allowed, dim=-1).squeeze(1).double().cpu()  # (B, c)
        real_rows = real_keys[:, start:stop] & (n_allowed > 0)
        normalised_rows = real_rows & (n_allowed > 1)
        out[:, start:stop, 0] = torch.where(real_rows, rows_entropy, 0.0)
        out[:, start:stop, 1] = torch.where(
            normalised_rows, rows_entropy / torch.log(n_allowed.clamp(min=2)), 0.0
        )
        out[:, start:stop, 2] = real_rows.double()
        out[:, start:stop, 3] = normalised_rows.double()
    return out


def _row_means(rows: torch.Tensor) -> tuple[float, float]:
    """Mean entropy and mean normalised entropy over the valid rows of a (n, 4) `_entropy` slice."""
    entropy_mean = rows[:, 0].sum() / rows[:, 2].sum().clamp(min=1)
    normalised_mean = rows[:, 1].sum() / rows[:, 3].sum().clamp(min=1)
    return float(entropy_mean), float(normalised_mean)


def _candidate_keys(module, mask4d, start, stop, n_keys, window=None) -> slice:
    """Keys outside which no query row in ``[start, stop)`` can attend: the causal past (and the sliding
    window's band) when the model passed no 4D mask, else all keys (a given mask may allow anything)."""
    if (isinstance(mask4d, torch.Tensor) and mask4d.dim() == 4) or not getattr(module, "is_causal", False):
        return slice(0, n_keys)
    # one key more than the band needs: exactness is `_allowed`'s
    first = max(0, start - window) if window else 0
    return slice(first, min(stop, n_keys))


def _allowed(module, mask4d, real_keys, start, stop, keys, window=None) -> torch.Tensor:
    """Which of ``keys`` each query row attends to: the 4D mask when the model built one, else causal (and the
    sliding window: ``attn_implementation="banded"`` passes no mask for unpadded sliding-window layers)."""
    if isinstance(mask4d, torch.Tensor) and mask4d.dim() == 4:
        return mask_allows(mask_rows(mask4d, slice(start, stop))[..., keys].cpu())
    causal = bool(getattr(module, "is_causal", False))
    return attendable(
        keys.stop, slice(start, stop), causal=causal, sliding_window=window, key_mask=real_keys, keys=keys
    )


def measure_layers(
    embedder: Embedder, texts: Sequence[str], *, kind: str = "document", batch_size: int | None = None
) -> LayerwiseResult:
    """Embeddings, per-layer high-frequency ratio and attention entropy of ``texts`` from one forward pass each
    (one per longest input where prefix sharing is exact: see the module docstring)."""
    if any(p.replaces_attention for p in embedder.active_interventions):
        raise NotApplicable(
            "attention entropy cannot be recorded while SelfExtend replaces the attention computation"
        )
    n = len(texts)
    n_layers = len({layer_index(name) for name, _ in attention_modules(embedder.model)})
    out = LayerwiseResult(
        embeddings=np.zeros((n, embedder.dim), np.float32),
        lengths=np.zeros(n, np.int64),
        high_frequency=np.full((n, n_layers + 1), np.nan),
        attention_entropy=np.full((n, n_layers), np.nan),
        attention_entropy_normalized=np.full((n, n_layers), np.nan),
    )
    encoded = embedder.tokenize(texts, kind=kind)
    sharing = embedder.prefix_sharing(kind)
    groups = (sharing_groups(embedder.name, sharing, encoded) if n > 1 else None) or {
        i: [i] for i in range(n)
    }
    roots = sorted(groups)
    bos = embedder.tokenizer.bos_token_id
    with record_attention_entropy(embedder.model) as records:
        for batch in embedder.iter_batches(
            [texts[r] for r in roots], kind=kind, batch_size=batch_size, output_hidden_states=True
        ):
            rows = [records[layer].pop() for layer in range(n_layers)]  # each (B, W, 4)
            mask = batch.attention_mask.clone()  # (B, W); the BOS is left out of the ratio
            width = mask.shape[1]
            for row, b in enumerate(batch.indices):
                root = roots[b]
                offset = width - len(encoded[root]) if embedder.padding_side == "left" else 0
                if bos is not None and encoded[root].input_ids[0] == bos:
                    mask[row, offset] = 0
                members = groups[root]
                shorter = [m for m in members if len(encoded[m]) < len(encoded[root])]
                vectors = {}
                if shorter:  # pooled from the final states, as the encoding pipeline pools shared prefixes
                    states = batch.hidden_states[-1][row]
                    pooled = pool_prefixes(
                        states, offset, [encoded[m] for m in shorter], embedder.spec.pooling
                    )
                    vectors = dict(zip(shorter, pooled, strict=True))
                for member in members:
                    size = len(encoded[member])
                    span = slice(offset, offset + size)
                    out.embeddings[member] = vectors.get(member, batch.embeddings[row]).numpy()
                    out.lengths[member] = size
                    out.high_frequency[member] = layerwise_high_frequency(
                        [h[row : row + 1, span] for h in batch.hidden_states], mask[row : row + 1, span]
                    )[:, 0]
                    for layer in range(n_layers):
                        (
                            out.attention_entropy[member, layer],
                            out.attention_entropy_normalized[member, layer],
                        ) = _row_means(rows[layer][row, span])
    return out
