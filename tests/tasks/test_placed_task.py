"""The placed task (issue 63): its probes against independent computations, its rows, end to end with the
logistic probe recomputed by scikit-learn from the run's saved embeddings, and its configuration refusals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from llm_collapse.data.placed import PlacedPassage
from llm_collapse.encoding.keys import text_hashes
from llm_collapse.errors import UserError
from llm_collapse.records.saved_embeddings import EMBEDDINGS_FILE, SavedEmbeddings
from llm_collapse.run.config import CompareConfig
from llm_collapse.tasks.base import TaskContext
from llm_collapse.tasks.knn import K as KNN_NEIGHBOURS
from llm_collapse.tasks.placed import PlacedInputs, PlacedOptions
from llm_collapse.tasks.registry import TASKS

LENGTHS, DEPTHS, N = (64, 256), (0.0, 1.0), 14


def _sklearn_logistic(X: np.ndarray, y: np.ndarray, seed: int) -> np.ndarray:
    """MTEB's classifier, out of fold with scikit-learn's own cross-validation: 0/1 correct per item."""
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    return (cross_val_predict(LogisticRegression(max_iter=100), X, y, cv=folds) == y).astype(int)


def _brute_knn(X: np.ndarray, y: np.ndarray, groups: list[str]) -> np.ndarray:
    """k = 5 cosine neighbours outside the item's group, majority vote (two labels, odd k: no ties)."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    correct = []
    for i in range(len(y)):
        others = [j for j in range(len(y)) if groups[j] != groups[i]]
        nearest = sorted(others, key=lambda j: -float(U[i] @ U[j]))[:KNN_NEIGHBOURS]
        votes = [y[j] for j in nearest]
        correct.append(int(max(set(votes), key=votes.count) == y[i]))
    return np.array(correct)


@pytest.fixture(scope="module")
def placed():
    return [
        PlacedPassage(f"p{i}", "pos" if i % 2 else "neg", length, depth, f"text {i} {length} {depth}", length)
        for i in range(N)
        for length in LENGTHS
        for depth in DEPTHS
    ]


@pytest.fixture(scope="module")
def vectors(placed):
    """Random vectors with a label signal that fades with length (the probes then differ by length)."""
    rng = np.random.default_rng(0)
    out = {}
    for p in placed:
        signal = (1.0 if p.label == "pos" else -1.0) * (2.0 if p.length == 64 else 0.3)
        out[p.text] = rng.normal(size=16) + signal * np.eye(16)[0]
    return out


def _context(vectors, seed=3) -> TaskContext:
    ctx = TaskContext(None, "oracle", "base", corpus="sotu", seed=seed, tasks=("placed",))
    ctx.encode = lambda texts, kind="document": np.stack([vectors[t] for t in texts]).astype(np.float32)
    return ctx


def _run(ctx, placed, probes=("logistic", "knn")) -> list[dict]:
    return TASKS["placed"].run(ctx, PlacedInputs(placed), PlacedOptions(placed_probes=list(probes)))


def test_probes_equal_scikit_learn_and_a_brute_force_knn(placed, vectors):
    ctx = _context(vectors)
    frame = pd.DataFrame(_run(ctx, placed))
    assert set(frame["task"]) == {"placed"} and (frame["n"] == N).all()
    assert len(frame) == len(LENGTHS) * len(DEPTHS) * 3
    for depth in DEPTHS:
        pool = [p for p in placed if p.depth == depth]
        X_pool = np.stack([vectors[p.text] for p in pool])
        y_pool = np.array([p.label for p in pool])
        cross = _brute_knn(X_pool, y_pool, [p.item_id for p in pool])
        for length in LENGTHS:
            part = [i for i, p in enumerate(pool) if p.length == length]
            X, y = X_pool[part], y_pool[part]
            expected = {
                "logistic_accuracy": _sklearn_logistic(X, y, seed=3),
                "knn_accuracy": _brute_knn(X, y, [str(i) for i in range(len(y))]),
                "knn_cross_accuracy": cross[part],
            }
            for metric, correct in expected.items():
                row = frame[
                    (frame["length"] == length) & (frame["depth"] == depth) & (frame["metric"] == metric)
                ]
                assert row["value"].item() == pytest.approx(correct.mean(), abs=1e-12), (
                    metric,
                    length,
                    depth,
                )
                key = ("placed" if metric == "logistic_accuracy" else f"placed/{metric}", length, depth)
                assert list(ctx.paired[key].values) == list(correct)
                assert ctx.paired[key].ids == tuple(p.item_id for p in np.array(pool)[part])
    short = frame[(frame["length"] == 64) & (frame["metric"] == "logistic_accuracy")]["value"]
    assert (short > 0.9).all()  # the toy signal is strong at 64 tokens: the probe is not stuck at chance


def test_probes_key_picks_the_probes(placed, vectors):
    knn_only = pd.DataFrame(_run(_context(vectors), placed, probes=("knn",)))
    assert set(knn_only["metric"]) == {"knn_accuracy", "knn_cross_accuracy"}
    logistic = pd.DataFrame(_run(_context(vectors), placed, probes=("logistic",)))
    assert set(logistic["metric"]) == {"logistic_accuracy"}


PLACED_RUN = dict(
    tiny="gemma3-270m", methods="base,tempscale:0.8", tasks="placed", corpus="sotu", label="major_party",
    placed_filler="kjv", placed_depths=[0, 1], lengths=[96, 192], max_per_bin=12, batch_size=8, dtype="fp32",
)  # fmt: skip


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_compare_end_to_end_logistic_equals_scikit_learn_on_saved_embeddings(run_compare, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, save_embeddings="float32", **PLACED_RUN) == 0
    frame = pd.read_parquet(out / "results.parquet")
    plain = frame[~frame["metric"].str.contains("_vs_")]
    assert set(plain["metric"]) == {"logistic_accuracy", "knn_accuracy", "knn_cross_accuracy"}
    assert len(plain) == 2 * 2 * 2 * 3 and (plain["n"] == 12).all()  # methods x lengths x depths x probes
    metrics = set(frame["metric"])
    for suffix in ("_vs_base", "_vs_shortest", "_vs_base_vs_shortest"):
        assert "logistic_accuracy" + suffix in metrics and "knn_cross_accuracy" + suffix in metrics
    record = json.loads((out / "run.json").read_text())
    described = record["inputs"]["placed"]
    assert described["passages_per_label"] == {"Democratic": 6, "Republican": 6}
    assert described["depths"] == [0.0, 1.0] and described["filler"] == "kjv"

    # The run's texts again (the inputs are a function of the config and the tokenizer), their saved vectors,
    # and scikit-learn's cross-validation on them: the per-item correctness of items.parquet, item by item.
    from llm_collapse.backends.hf import load_tokenizer
    from llm_collapse.tasks.inputs import build_inputs

    config = CompareConfig.from_sources(record["config"]).validate()
    tokenizer = load_tokenizer(config.model_paths["gemma3-270m"])
    placed = build_inputs(config, tokenizer).own["placed"].passages
    saved = SavedEmbeddings.read(out / EMBEDDINGS_FILE)
    items = pd.read_parquet(out / "items.parquet")
    checked = 0
    for method in ("base", "tempscale-0.8"):
        for length in (96, 192):
            for depth in (0.0, 1.0):
                part = [p for p in placed if p.length == length and p.depth == depth]
                X = saved.get("gemma3-270m", method, text_hashes([p.text for p in part], "document", None))
                expected = _sklearn_logistic(X, np.array([p.label for p in part]), seed=config.seed)
                mine = items[(items["task"] == "placed") & (items["method"] == method)
                             & (items["length"] == length) & (items["depth"] == depth)]  # fmt: skip
                by_item = dict(zip(mine["item"], mine["logistic_accuracy"], strict=True))
                assert [by_item[p.item_id] for p in part] == list(expected)
                checked += 1
    assert checked == 8
    report = (out / "report.md").read_text()
    assert "Labelled passage in growing filler" in report


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (dict(placed_depths=[0.5, 1.5]), "--placed-depths must be distinct numbers in"),
        (dict(placed_depths=[0.5, 0.5]), "--placed-depths must be distinct numbers in"),
        (dict(placed_probes=["svm"]), "--placed-probes must name each of"),
        (dict(placed_filler="sotu"), "is the passages' own corpus"),
        (dict(placed_filler="nope"), "nope"),
        (dict(max_per_bin=8), "use --max-per-bin >= 12"),
        (dict(tasks=["collapse"], placed_depths=[0.5]), "--placed-depths applies to --tasks placed only"),
        (dict(tasks=["collapse"], label="major_party"), "--label applies to --tasks knn or placed only"),
    ],
)
def test_config_refuses_bad_placed_options_in_one_line(flags, message):
    values = {"models": ["minilm"], "tasks": ["placed"], "corpus": "sotu", **flags}
    with pytest.raises(UserError, match=message) as err:
        CompareConfig.from_values(values).validate()
    assert "\n" not in str(err.value)


def test_defaults_and_run_id():
    config = CompareConfig(models=["minilm"], tasks=["placed"], corpus="sotu").validate()
    options = config.tasks["placed"]
    assert options.filler("sotu") == "kjv" and options.probes == ("logistic", "knn")
    kjv = CompareConfig(models=["minilm"], tasks=["placed"], corpus="kjv").validate()
    assert kjv.tasks["placed"].filler(kjv.corpus) == "sotu"
    same = CompareConfig.from_values(
        dict(models=["minilm"], tasks=["placed"], corpus="sotu", placed_depths=[0.5])
    ).validate()
    assert same.run_id() != config.run_id()  # a set option enters the id; unset, older runs keep theirs
