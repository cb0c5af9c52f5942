"""Length-sorted batches under a token budget, so long and short texts are never padded together."""

from __future__ import annotations

from collections.abc import Sequence


def plan_batches(lengths: Sequence[int], *, max_batch_size: int, max_tokens: int) -> list[list[int]]:
    """Groups indices, longest first, so that ``len(batch) * longest <= max_tokens`` (one text at least).

    Args:
        lengths: Token count per text.
        max_batch_size: Most texts per batch.
        max_tokens: Most padded tokens per batch; a single longer text still gets a batch of its own.

    Returns:
        Batches of indices into ``lengths``; every index appears exactly once.
    """
    if max_batch_size < 1 or max_tokens < 1:
        raise ValueError(f"max_batch_size and max_tokens must be >= 1, got {max_batch_size} and {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        longest = lengths[current[0]] if current else lengths[index]
        if current and (len(current) == max_batch_size or longest * (len(current) + 1) > max_tokens):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches
