from __future__ import annotations

import pytest
import torch

from llm_collapse.encoding.batching import plan_batches
from llm_collapse.encoding.pooling import last_token_pool, mean_pool, pool


def test_last_token_pool_reads_last_masked_position_for_either_padding():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert torch.equal(last_token_pool(hidden, right), torch.stack([hidden[0, 1], hidden[1, 3]]))
    assert torch.equal(last_token_pool(hidden, left), torch.stack([hidden[0, 3], hidden[1, 3]]))


def test_mean_pool_is_fp32_mean_over_mask():
    hidden = torch.randn(2, 5, 4, dtype=torch.bfloat16)
    mask = torch.tensor([[0, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    out = mean_pool(hidden, mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out[0], hidden[0, 1:3].float().mean(0))
    torch.testing.assert_close(out[1], hidden[1].float().mean(0))


def test_pool_rejects_unknown_mode():
    with pytest.raises(ValueError, match="allowed: last, mean"):
        pool(torch.zeros(1, 1, 1), torch.ones(1, 1), "max")


def test_plan_batches_respects_budget_and_covers_everything():
    lengths = [5, 100, 7, 50, 50, 3, 1000]
    batches = plan_batches(lengths, max_batch_size=3, max_tokens=120)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) <= 3
        assert len(batch) == 1 or longest * len(batch) <= 120
        # sorted by length: no batch mixes a long text with much shorter ones than necessary
        assert [lengths[i] for i in batch] == sorted((lengths[i] for i in batch), reverse=True)
    assert [6] in batches  # the over-budget text gets a batch of its own


def test_plan_batches_rejects_bad_limits():
    with pytest.raises(ValueError):
        plan_batches([1], max_batch_size=0, max_tokens=10)


def test_long_texts_are_never_padded():
    lengths = [2000, 1990, 2000, 1500, 900, 880, 870]
    batches = plan_batches(
        lengths, max_batch_size=8, max_tokens=100_000, unpadded_from=1024, max_padding=None
    )
    assert batches == [[0, 2], [1], [3], [4, 5, 6]]
    assert plan_batches(
        lengths, max_batch_size=8, max_tokens=100_000, unpadded_from=None, max_padding=None
    ) == [[0, 2, 1, 3, 4, 5, 6]]


def test_batches_waste_at_most_max_padding():
    lengths = [100, 95, 81, 79, 60, 50, 41, 40]
    batches = plan_batches(lengths, max_batch_size=8, max_tokens=10_000, max_padding=0.2)
    assert batches == [[0, 1, 2], [3], [4, 5], [6, 7]]
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert all(lengths[i] >= 0.8 * longest for i in batch)
