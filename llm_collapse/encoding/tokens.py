"""Token observers (`Embedder.observe_tokens`): each text a forward reads is handed on with the last layer's states
of its input positions and its pool mask, from the forward that makes its embedding, prefix sharing included, so a
statistic of the token cloud behind an embedding needs no second forward.

Decisions:

- An observer is called per batch, right after its forward, with that batch's states still on the model's
  device; it reduces them (moments, a subsample) and keeps no reference, so no more than one batch's states
  are held at any time (the road drops its own reference before the next forward).
- What it gets is the text's span of its row, (n_input, d), and the pool mask of that span (bool, n_input): the
  positions the model's pooling reads (its card's rule: special tokens, a skipped BOS, echo's second copy). A
  text read from a longer input's forward (prefix sharing) gets its own span and mask within that row.
- Where a forward hands on no token states, observing is refused in one line before any vector is returned:
  a backend that pools itself (vLLM) or an input embedding of its own (PCW's chunks, averaged). NV-Embed's
  states are those its latent-attention pooler returns, which its mean pooling reads.
- A text whose vector a cache serves runs no forward and is not observed: the caller sends it through the road
  (`llm_collapse.tasks.base.TaskContext.encode` with ``fresh=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from llm_collapse.adapters.inputs import EncodedText
from llm_collapse.interventions import NotApplicable

TokenObserver = Callable[[str, torch.Tensor, torch.Tensor], None]
"""``(text, states (n_input, d) on the model's device, pool mask (n_input,) bool)`` for each text a forward reads."""


def observe(
    observers: Sequence[TokenObserver],
    texts: Sequence[str],
    indices: Sequence[int],
    groups: dict[int, list[int]] | None,
    encoded: Sequence[EncodedText],
    states: torch.Tensor | None,
    *,
    padding_side: str,
) -> None:
    """Hands every text read from one forward to each observer: the batch's rows are ``indices`` (roots, where
    ``groups`` maps a root to the texts read from its row), ``states`` its (B, L, d) last-layer states."""
    if states is None:
        raise NotApplicable(
            "token states are not available on this road (a backend that pools itself, vLLM, or an input "
            "embedding of its own, PCW); use backend='hf' without such a method"
        )
    width = states.shape[1]
    for row, root in enumerate(indices):
        offset = width - len(encoded[root]) if padding_side == "left" else 0
        for member in groups[root] if groups is not None else [root]:
            item = encoded[member]
            span = states[row, offset : offset + len(item)]
            mask = torch.tensor(item.pool_mask, dtype=torch.bool, device=states.device)
            for observer in observers:
                observer(texts[member], span, mask)
