"""The logistic probe against scikit-learn's own cross-validation on the same embeddings."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict, cross_val_score

from llm_collapse.metrics.logistic import logistic_correct


def _embeddings(n: int = 60, d: int = 16, seed: int = 0, shift: float = 0.6):
    rng = np.random.default_rng(seed)
    y = np.array(["neg", "pos"] * (n // 2))
    X = rng.normal(size=(n, d)) + shift * (y == "pos")[:, None]  # two overlapping classes: some errors
    return X / np.linalg.norm(X, axis=1, keepdims=True), y


def test_equals_scikit_learns_cross_validation():
    X, y = _embeddings()
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=3)
    correct = logistic_correct(X, y, seed=3)
    expected = cross_val_predict(LogisticRegression(max_iter=100), X, y, cv=folds) == y
    np.testing.assert_array_equal(correct, expected.astype(int))
    assert 0.5 < correct.mean() < 1.0  # neither chance nor perfect: the comparison can fail
    scores = cross_val_score(LogisticRegression(max_iter=100), X, y, cv=folds)  # equal folds of 12
    assert correct.mean() == pytest.approx(scores.mean())


def test_the_seed_chooses_the_folds_and_the_same_seed_repeats():
    X, y = _embeddings(seed=1)
    assert np.array_equal(logistic_correct(X, y, seed=0), logistic_correct(X, y, seed=0))
    different = [
        not np.array_equal(logistic_correct(X, y, seed=0), logistic_correct(X, y, seed=s)) for s in (1, 2, 3)
    ]
    assert any(different)


def test_too_few_items_per_class_give_none_with_a_warning(caplog):
    X, y = _embeddings(n=8)
    with caplog.at_level(logging.WARNING, logger="llm_collapse.metrics.logistic"):
        assert logistic_correct(X, y, label="tiny") is None  # 4 per class < 5 folds
        assert logistic_correct(X, np.array(["a"] * 8)) is None
    assert "'tiny'" in caplog.text
    with pytest.raises(ValueError, match="labels"):
        logistic_correct(X, y[:3])
