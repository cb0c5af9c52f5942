"""`llm_collapse.metrics.attention`: the attendable-key rule against a brute-force loop, and the entropy
against a direct ``-sum p ln p``."""

from __future__ import annotations

import math

import pytest
import torch

from llm_collapse.metrics.attention import attendable, attention_entropy, entropy, mask_allows


def _brute(n_keys, rows, *, causal, window=None, key_mask=None):
    """One Python comparison per (sequence, query, key)."""
    batch = 1 if key_mask is None else key_mask.shape[0]
    out = torch.zeros(batch, 1, rows.stop - rows.start, n_keys, dtype=torch.bool)
    for b in range(batch):
        for row, q in enumerate(range(rows.start, rows.stop)):
            for k in range(n_keys):
                ok = key_mask is None or bool(key_mask[b, k])
                if causal:
                    ok = ok and k <= q and (not window or q - k < window)
                out[b, 0, row, k] = ok
    return out


PADDING = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1, 1, 1]])  # right, left padded


@pytest.mark.parametrize(
    ("causal", "window", "key_mask"),
    [
        (True, None, None),  # causal
        (True, 3, None),  # sliding window
        (True, 0, None),  # a window of 0 is no window
        (False, None, None),  # bidirectional
        (False, 3, None),  # a window does not apply to bidirectional attention
        (True, None, PADDING),  # padded causal
        (True, 4, PADDING),  # padded sliding window
        (False, None, PADDING),  # padded bidirectional
    ],
)
@pytest.mark.parametrize("rows", [slice(0, 9), slice(2, 7), slice(6, 9)])
def test_attendable_matches_a_brute_force_loop(causal, window, key_mask, rows):
    got = attendable(9, rows, causal=causal, sliding_window=window, key_mask=key_mask)
    expected = _brute(9, rows, causal=causal, window=window, key_mask=key_mask)
    assert got.dtype == torch.bool and got.shape == expected.shape
    assert torch.equal(got, expected)


def test_fewer_queries_than_keys_sit_at_the_last_key_positions():
    got = attendable(7, slice(4, 7), causal=True)  # 3 queries against 7 keys (a KV cache)
    assert got[0, 0].sum(-1).tolist() == [5, 6, 7]


def test_mask_allows_reads_boolean_and_additive_masks():
    allowed = _brute(6, slice(0, 6), causal=True, window=2)
    assert torch.equal(mask_allows(allowed), allowed)
    for dtype in (torch.float32, torch.bfloat16):
        additive = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        assert torch.equal(mask_allows(additive), allowed)


def _direct_entropy(p: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(p.shape[:-1], dtype=torch.float64)
    for index in torch.cartesian_prod(*(torch.arange(n) for n in p.shape[:-1])).reshape(-1, p.dim() - 1):
        row = p[tuple(index)].double()
        out[tuple(index)] = -sum(float(x) * math.log(float(x)) for x in row if x > 0)
    return out


def test_entropy_matches_a_direct_sum():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64) * 2
    logits[..., :2] = -math.inf  # masked keys: p = 0, contributing 0 ln 0 = 0
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    expected = _direct_entropy(p)
    assert torch.allclose(entropy(p), expected, atol=1e-12)
    assert torch.allclose(entropy(p, logp), expected, atol=1e-12)
    assert torch.equal(entropy(torch.tensor([0.0, 1.0, 0.0])), torch.tensor(0.0))


def test_attention_entropy_matches_a_direct_mean_over_rows():
    generator = torch.Generator().manual_seed(1)
    mask = PADDING[:, :8]
    probs = torch.softmax(torch.randn(2, 2, 8, 8, generator=generator, dtype=torch.float64), dim=-1)
    got = attention_entropy(probs, mask, causal=True, dtype=torch.float64)
    allowed = _brute(8, slice(0, 8), causal=True, key_mask=mask)
    expected = torch.zeros(2, 2, dtype=torch.float64)
    for b in range(2):
        for h in range(2):
            values = [
                _direct_entropy(torch.where(allowed[b, 0, i], probs[b, h, i], 0.0)[None])[0]
                for i in range(8)
                if mask[b, i] and allowed[b, 0, i].any()
            ]
            expected[b, h] = sum(values) / len(values)
    assert torch.allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("window", [None, 3])
def test_attendable_over_a_key_slice_is_that_slice_of_the_full_mask(window):
    key_mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 0]])
    full = attendable(9, slice(4, 8), causal=True, sliding_window=window, key_mask=key_mask)
    for keys in (slice(0, 9), slice(2, 8), slice(5, 6)):
        got = attendable(9, slice(4, 8), causal=True, sliding_window=window, key_mask=key_mask, keys=keys)
        assert torch.equal(got, full[..., keys])
