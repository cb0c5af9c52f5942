"""Bench texts: the length-mixed corpus, exact-length texts and the long document."""

from __future__ import annotations

from llm_collapse.bench.config import BenchConfig


def mixed_texts(documents, tokenizer, config: BenchConfig) -> list:
    """Length-mixed spans (`BinnedText`), targets ``bins_lo, 2 bins_lo, ..., bins_top`` tokens."""
    from llm_collapse.data import log2_bins, sample_length_binned

    bins = log2_bins(config.bins_lo, config.bins_top * 2)
    per_bin = max(1, round(config.texts / len(bins)))
    return sample_length_binned(documents, tokenizer, bins, per_bin=per_bin, seed=config.seed)


def exact_length_texts(documents, embedder, length: int, count: int, seed: int = 0) -> list[str]:
    """``count`` texts that the embedder encodes to exactly ``length`` tokens (special tokens included)."""
    from llm_collapse.data import LengthBin, sample_length_binned
    from llm_collapse.data.bins import token_prefix

    special = len(embedder.tokenize([""])[0])
    target = length - special
    binned = sample_length_binned(
        documents, embedder.tokenizer, [LengthBin(target, 2 * target, target)], per_bin=count, seed=seed
    )
    texts = [token_prefix(b.text, target, embedder.tokenizer) for b in binned]
    return [t for t, e in zip(texts, embedder.tokenize(texts), strict=True) if len(e) == length]


def long_document(documents, tokenizer, n_tokens: int) -> str:
    """A prefix of exactly ``n_tokens`` text tokens of the longest document (more joined when needed)."""
    from llm_collapse.data import count_tokens
    from llm_collapse.data.bins import token_prefix

    counts = count_tokens([d.text for d in documents], tokenizer)
    order = sorted(range(len(documents)), key=lambda i: (-counts[i], documents[i].doc_id))
    text, total = "", 0
    for i in order:
        text = documents[i].text if not text else text + "\n\n" + documents[i].text
        total += counts[i]
        if total > n_tokens:
            break
    return token_prefix(text, n_tokens, tokenizer)
