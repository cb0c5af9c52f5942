"""The cache around the road from texts to vectors: look each text up, embed only the misses, put each batch.

`cache_for` names the cache of an embedder as it is now (`llm_collapse.encoding.keys`); `encode_cached`
hashes the texts, reads the hits from the store (`llm_collapse.encoding.cache`), runs the misses through
`llm_collapse.encoding.pipeline` and writes each finished batch at once, so a run killed half-way loses at
most the batch in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from llm_collapse.adapters.inputs import Kind
from llm_collapse.encoding.cache import EmbeddingCache
from llm_collapse.encoding.keys import cache_dir, cache_key, key_difference, text_hashes
from llm_collapse.encoding.pipeline import iter_batches
from llm_collapse.encoding.texts import as_text_list
from llm_collapse.utils import progress

logger = logging.getLogger(__name__)


def cache_for(embedder, root: str | Path | None = None) -> EmbeddingCache:
    """The cache for ``embedder`` as it is now (interventions included): ``<root>/embeddings/<key>/``.

    Make it where the vectors are computed: inside an ``embedder.intervene(...)`` block the key carries the
    intervention, outside it does not.
    """
    key = cache_key(embedder)
    directory = cache_dir(key, root)
    return EmbeddingCache(directory, key=key, dim=embedder.dim)


def encode_cached(
    embedder,
    texts: Sequence[str],
    *,
    kind: Kind = "document",
    instruction: str | None = None,
    cache: EmbeddingCache | None,
    batch_size: int | None = None,
    show_progress_bar: bool | None = None,
    overwrite: bool = False,
) -> np.ndarray:
    """`Embedder.encode` through ``cache``: only texts not cached yet are embedded.

    Identical texts in ``texts`` are embedded once. With ``cache=None`` nothing is read or written (texts are
    still de-duplicated); with ``overwrite=True`` every text is embedded again and re-written.

    Args:
        embedder: The `Embedder`, in the state (interventions) the cache was made for.
        texts: A list of strings.
        kind: ``"query"`` or ``"document"``, as in `Embedder.encode`.
        instruction: Query instruction, as in `Embedder.encode` (None means the card's default).
        cache: From `cache_for` (its key must match the embedder now, else ``ValueError``), or None.
        batch_size: Most texts per batch.
        show_progress_bar: As in `Embedder.encode`.
        overwrite: Embed and store every text even when cached.

    Returns:
        (n, d) float32 array of unit vectors in input order: what ``embedder.encode`` returns. Bit-identical
        when ``texts`` has no duplicates and the cached texts were embedded in the same batches.
    """
    texts = as_text_list(texts)
    hashes = text_hashes(texts, kind, embedder.resolve_instruction(kind, instruction))
    if (
        cache is not None
        and cache.key is not None
        and (differing := key_difference(cache_key(embedder), cache.key))
    ):
        raise ValueError(
            f"cache {cache.directory} was made for another embedder state (differs in {differing}); "
            "call cache_for(embedder) where the vectors are computed, e.g. inside the intervene() block"
        )
    first: dict[str, int] = {}  # each distinct text's first position, in input order
    for index, h in enumerate(hashes):
        first.setdefault(h, index)
    found = {} if cache is None or overwrite else cache.get(list(first))
    missing = [h for h in first if h not in found]
    if cache is not None:
        duplicates = f" ({len(texts) - len(first)} duplicate texts)" if len(texts) > len(first) else ""
        said = "cache: %d hits, %d to embed%s", len(found), len(missing), duplicates
        # under a run its display sums the calls into one line per cell; alone, one line per call
        hits = {h: len(texts[first[h]]) for h in found}
        (logger.debug if progress.served(hits, missing) else logger.info)(*said)
    vectors: dict[str, np.ndarray] = dict(found)
    misses = [texts[first[h]] for h in missing]
    batches = iter_batches(
        embedder,
        misses,
        kind=kind,
        instruction=instruction,
        batch_size=batch_size,
        show_progress_bar=show_progress_bar,
    )
    for batch in batches if misses else ():  # nothing to plan when every text was cached
        batch_hashes = [missing[i] for i in batch.indices]
        batch_vectors = batch.embeddings.numpy().astype(np.float32, copy=False)
        if cache is not None:
            cache.put(batch_hashes, batch_vectors)
        vectors.update(zip(batch_hashes, batch_vectors, strict=True))
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for index, h in enumerate(hashes):
        out[index] = vectors[h]
    return out
