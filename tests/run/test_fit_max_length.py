"""`fit_max_length`: a run raises an embedder's max_length to its longest bin (capped at an absolute-position
model's table) and logs the raise, so the load line's smaller max_length is not the last word."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from llm_collapse.run.models import fit_max_length


@pytest.mark.parametrize(
    ("has_rope", "start", "longest", "expected"),
    [
        (False, 256, 512, 512),  # minilm: 512 * 1.1 + 16 capped at its 512 positions
        (True, 256, 512, 579),  # a RoPE model: the longest bin's upper edge plus 16
        (True, 8192, 512, 8192),  # never lowered
    ],
)
def test_max_length_fits_the_longest_bin_and_the_raise_is_logged(caplog, has_rope, start, longest, expected):
    embedder = SimpleNamespace(
        name="m", max_length=start, backend=SimpleNamespace(has_rope=has_rope, max_positions=512)
    )
    with caplog.at_level(logging.INFO, logger="llm_collapse.run.models"):
        fit_max_length(embedder, SimpleNamespace(lengths=[64, longest]))
    assert embedder.max_length == expected
    raised = [r.getMessage() for r in caplog.records]
    assert raised == ([f"m: max_length raised from {start} to {expected} tokens for the run's longest length"]
                      if expected > start else [])  # fmt: skip
