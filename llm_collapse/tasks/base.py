"""What every task receives: the embedder in its intervention state, the shared inputs, the cache."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from llm_collapse.cache import EmbeddingCache, encode_cached
from llm_collapse.config import CompareConfig
from llm_collapse.embedder import Embedder

logger = logging.getLogger(__name__)


@dataclass
class TaskContext:
    """One (model, method) cell of a comparison.

    Attributes:
        embedder: The loaded embedder, with the method's interventions applied.
        model: Model name as given in the config.
        method: Intervention slug.
        config: The run's configuration.
        inputs: Shared inputs (`llm_collapse.tasks.inputs.RunInputs`): the same texts for every model.
        cache: Embedding cache for this embedder state.
        overwrite: Recompute every embedding once in this cell instead of reading the cache.
        record: Per-cell bookkeeping for run.json (truncations, OOM retries).
    """

    embedder: Embedder
    model: str
    method: str
    config: CompareConfig
    inputs: object
    cache: EmbeddingCache | None
    overwrite: bool = False
    record: dict = field(default_factory=dict)
    _recomputed: set[tuple[str, str]] = field(default_factory=set)
    batch_size: int = 0

    def __post_init__(self) -> None:
        self.batch_size = self.batch_size or self.config.batch_size

    def row(self, **kwargs) -> dict:
        from llm_collapse.results import result_row

        return result_row(model=self.model, method=self.method, corpus=self.config.corpus, **kwargs)

    def encode(self, texts: list[str], *, kind: str = "document") -> np.ndarray:
        """Cached encoding; an out-of-memory error halves the batch and token budget and retries (recorded)."""
        truncated = sum(e.truncated for e in self.embedder.tokenize(texts, kind=kind))
        self.record["truncated"] = self.record.get("truncated", 0) + truncated
        while True:
            try:
                return self._encode_once(texts, kind)
            except (torch.OutOfMemoryError, MemoryError, RuntimeError) as err:
                if not _is_out_of_memory(err) or (
                    self.embedder.max_tokens_per_batch <= 1 and self.batch_size <= 1
                ):
                    raise
                self.embedder.max_tokens_per_batch = max(1, self.embedder.max_tokens_per_batch // 2)
                self.batch_size = max(1, self.batch_size // 2)
                retry = f"{type(err).__name__}: batch_size -> {self.batch_size}, tokens -> {self.embedder.max_tokens_per_batch}"
                self.record.setdefault("oom_retries", []).append(retry)
                logger.warning("%s/%s out of memory; retrying with %s", self.model, self.method, retry)

    def _encode_once(self, texts: list[str], kind: str) -> np.ndarray:
        """With ``overwrite``, texts not yet recomputed in this cell are embedded again, the rest cached."""
        fresh = [t for t in texts if (kind, t) not in self._recomputed] if self.overwrite else []
        if fresh:
            encode_cached(
                self.embedder, fresh, kind=kind, cache=self.cache, batch_size=self.batch_size, overwrite=True
            )
            self._recomputed.update((kind, t) for t in fresh)
        return encode_cached(self.embedder, texts, kind=kind, cache=self.cache, batch_size=self.batch_size)


def _is_out_of_memory(err: BaseException) -> bool:
    text = str(err).lower()
    return (
        isinstance(err, (torch.OutOfMemoryError, MemoryError))
        or "out of memory" in text
        or "can't allocate" in text
    )


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a proportion (accuracy over n independent items)."""
    if n == 0:
        return math.nan, math.nan
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
