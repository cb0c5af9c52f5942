"""Texts to vectors, one road: plan the forwards, run them in batches, pool, cache.

Read it top to bottom:

- `plan`: tokenise as the model reads, group inputs that are token prefixes of another (`prefix`), plan
  length-sorted batches under the token budget (`batching`).
- `forward`: each batch through the backend, pooled (`pooling`) and L2-normalised; `prefix.shared_rows`
  reads the grouped texts from their root's states.
- `pipeline`: the loop over the planned batches (`Embedder.encode` and `Embedder.iter_batches`).
- `cached`: the cache around the road; `keys` names a cache folder and a text's entry, `cache` stores them.

`llm_collapse.Embedder` and a run's `TaskContext` (which embeds through the cache, with out-of-memory
retries) are `Encoder`s: tasks and the MTEB wrapper call only ``encode``. The modules here take the embedder
as an argument and never import it (it imports them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Encoder(Protocol):
    """Texts in, (n, d) float32 unit vectors out, in input order."""

    def encode(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray: ...
