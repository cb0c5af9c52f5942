"""`llm_collapse.cost.estimate`: FLOP counting against independent computations, and the CLI's contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from llm_collapse.adapters import resolve_spec
from llm_collapse.adapters.dims import LatentPooler, PublishedDims
from llm_collapse.cli.estimate import main
from llm_collapse.cost.estimate import Assumptions, ModelPlan, estimate, model_for, text_cost
from llm_collapse.run.config import CompareConfig
from llm_collapse.testing.cli import flag_argv

YAML = Path(__file__).resolve().parents[2] / "experiments" / "gpu_7b.yaml"
SMALL = PublishedDims(
    source="test", hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=100
)


def _plan(
    dims: PublishedDims, *, attention: str = "sdpa", echo: bool = False, causal: bool = True
) -> ModelPlan:
    return ModelPlan("small", dims, attention, 2 if echo else 1, causal)


def _by_hand(dims: PublishedDims, n: int, window: int | None = None, causal: bool = True) -> float:
    """Every linear as rows x cols multiply-adds, every (query, key) pair visited one by one."""
    d_attn = dims.heads * dims.head_dim
    kv = dims.kv_heads * dims.head_dim
    per_layer = (
        dims.hidden * d_attn
        + 2 * dims.hidden * kv
        + d_attn * dims.hidden
        + 3 * dims.hidden * dims.intermediate
    )
    flops = 0.0
    for _ in range(dims.layers):
        flops += 2 * per_layer * n
        for q in range(n):
            keys = range(n) if not causal else range(max(0, q - window + 1) if window else 0, q + 1)
            flops += len(keys) * d_attn * 2 * 2  # q.k and p.v, one multiply-add each per channel
    return flops


@pytest.mark.parametrize("n", [1, 7, 40])
def test_causal_flops_match_a_hand_count(n):
    assert text_cost(_plan(SMALL), n, Assumptions()).model_flops == pytest.approx(_by_hand(SMALL, n))


def test_bidirectional_and_pooler_flops_match_a_hand_count():
    pooler = LatentPooler(latents=5, heads=2, head_dim=8, ff_mult=4)
    dims = PublishedDims(**{**SMALL.__dict__, "pooler": pooler})
    n, h, inner = 11, dims.hidden, 2 * 8
    by_hand = _by_hand(dims, n, causal=False)
    by_hand += 2 * n * (h * inner + inner * h)  # to_q, to_out on every token
    by_hand += 2 * n * (h * 8 * h + 4 * h * h)  # GEGLU feed-forward: H -> 8H, 4H -> H
    by_hand += 2 * 2 * n * 5 * inner  # cross-attention: n queries x 5 latents, scores and values
    by_hand += 2 * 5 * h * 2 * inner  # to_kv on the latents, once per text
    assert text_cost(_plan(dims, causal=False), n, Assumptions()).model_flops == pytest.approx(by_hand)


def test_sliding_window_reduces_flops_only_above_the_window():
    window = 16
    slid = PublishedDims(**{**SMALL.__dict__, "window": window, "sliding": "all"})
    for n in (1, 8, window):
        assert (
            text_cost(_plan(slid), n, Assumptions()).model_flops
            == text_cost(_plan(SMALL), n, Assumptions()).model_flops
        )
    for n in (window + 1, 3 * window):
        cost = text_cost(_plan(slid), n, Assumptions()).model_flops
        assert cost < text_cost(_plan(SMALL), n, Assumptions()).model_flops
        assert cost == pytest.approx(_by_hand(SMALL, n, window=window))
    alternating = PublishedDims(**{**SMALL.__dict__, "window": window, "sliding": "even"})
    assert alternating.layer_windows() == (window, None, window)
    assert alternating.layer_windows(window_off=True) == (None, None, None)
    # the banded kernel runs more pairs than it needs, but fewer than full causal attention at long lengths
    banded = text_cost(_plan(slid, attention="banded"), 8 * window, Assumptions())
    full = text_cost(_plan(SMALL, attention="banded"), 8 * window, Assumptions())
    assert banded.model_flops < banded.executed_flops < full.executed_flops


def test_echo_doubles_the_length():
    plain = text_cost(_plan(SMALL), 200, Assumptions())
    echo = text_cost(_plan(SMALL, echo=True), 100, Assumptions())
    assert echo.positions == 200
    assert echo.model_flops == plain.model_flops
    assert (model_for("echo-mistral").copies, model_for("mistral").copies) == (2, 1)


def test_published_parameter_counts():
    """Linear counts equal a real transformers module's; totals match the model cards' parameter counts."""
    from transformers import MistralConfig, MistralModel

    from llm_collapse.models.nv_embed import LatentAttentionPooler

    small = MistralConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=100,
    )  # fmt: skip
    with torch.device("meta"):
        model = MistralModel(small)
        pooler = LatentAttentionPooler(512, 8, 4096, 4096, 4096)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert SMALL.backbone_linear_params() == linear
    pooler_weights = sum(
        p.numel() for n, p in pooler.named_parameters() if "norm" not in n and "bias" not in n
    )
    assert LatentPooler().params(4096) == pooler_weights

    # mteb: NV-Embed-v2 7.85B; hub: bge-multilingual-gemma2 9.24B, e5-mistral-7b-instruct 7.11B
    def params(name: str) -> int:
        return resolve_spec(name)[0].published.params()

    assert params("nv-embed") == pytest.approx(7.85e9, rel=0.01)
    assert params("bge-gemma2") == pytest.approx(9.24e9, rel=0.01)
    assert params("mistral") == pytest.approx(7.11e9, rel=0.01)


def test_causality_is_the_specs():
    """One record per model: the estimate reads causality from the spec, never a second table."""
    assert [model_for(n).causal for n in ("mistral", "nv-embed", "bge-gemma2", "gte-qwen2")] == [
        True, False, True, False,
    ]  # fmt: skip


def test_gpu_7b_yaml_validates_and_estimates_without_weights():
    config = CompareConfig.from_sources({}, str(YAML))
    assert config.models == ["mistral", "nv-embed", "bge-gemma2", "echo-mistral"]
    assert (
        max(config.lengths) == 32768
        and config.tasks["passkey"].retrieval_docs == 100
        and config.dtype == "bf16"
    )
    result = estimate(config, Assumptions(gpu_gib=80))
    assert len(result.rows) == 4 * len(config.lengths)
    for model in config.models:
        rows = [r for r in result.rows if r.model == model]
        assert [r.seconds for r in rows] == sorted(r.seconds for r in rows)  # longer texts cost more
        assert all(r.peak_gib < 80 for r in rows)


def test_cli_writes_markdown(tmp_path, capsys):
    out = tmp_path / "estimate.md"
    assert main(flag_argv(config=YAML, models="mistral", lengths=[256, 32768], markdown=out, tflops=400)) == 0
    printed = capsys.readouterr().out
    assert "not measurements" in printed and "400 TFLOP/s" in printed
    assert "| mistral | 32768 |" in out.read_text()


@pytest.mark.parametrize(
    "args",
    [
        ["--models", "minilm"],  # no published dimensions
        ["--models", "nope"],
        ["--tflops", "0"],
        ["--tflops", "fast"],
        ["--config", "missing.yaml"],
        ["--methods", "ntk:abc"],
        ["--softcap-attention", "eager"],
    ],
)
def test_bad_input_gives_one_line_and_exit_2(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code = main(args)
        raise SystemExit(code)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("error: ")


def test_token_budget_is_the_loaders_default():
    import inspect

    from llm_collapse.cost.estimate import MAX_TOKENS_PER_BATCH
    from llm_collapse.load import load_embedder

    assert inspect.signature(load_embedder).parameters["max_tokens_per_batch"].default == MAX_TOKENS_PER_BATCH


def test_memory_is_weights_plus_activations():
    from llm_collapse.cost.estimate import GIB, peak_bytes

    plan = model_for("mistral")
    weights = plan.dims.params() * 2
    assert peak_bytes(plan, 1, 1, overhead_gib=0) == pytest.approx(weights, abs=2**20)
    assert (
        peak_bytes(plan, 32768, 1, overhead_gib=1) > peak_bytes(plan, 4096, 1, overhead_gib=1) > weights + GIB
    )
    assert peak_bytes(plan, 1, 1, quant="nf4", overhead_gib=0) == pytest.approx(weights / 4, abs=2**20)


def test_window_off_costs_more_and_is_not_applicable_without_a_window():
    def minutes(methods):
        config = CompareConfig.from_sources(
            {"models": ["mistral", "nv-embed"], "methods": methods, "lengths": [32768], "tasks": ["passkey"]}
        )
        return estimate(config)

    base, both = minutes(["base"]), minutes(["base", "window:off"])  # full causal attention at 8 x the window
    assert both.model_minutes("mistral") > 2 * base.model_minutes("mistral")
    assert both.model_minutes("nv-embed") == pytest.approx(base.model_minutes("nv-embed"))
    assert both.notes == ["nv-embed x window:off: not applicable (no sliding window), not costed"]


def _tiles_by_hand(n: int, window: int | None, causal: bool, block: int = 128) -> int:
    """Every block x block tile checked pair by pair: counted whole when any pair in it may attend."""
    total = 0
    for qa in range(0, n, block):
        for ka in range(0, n, block):
            rows, keys = range(qa, min(qa + block, n)), range(ka, min(ka + block, n))
            if any(not causal or (k <= q and (window is None or q - k < window)) for q in rows for k in keys):
                total += len(rows) * len(keys)
    return total


@pytest.mark.parametrize(
    "n, window, causal",
    [
        (1, None, True),
        (130, None, True),
        (300, 64, True),
        (700, 256, True),
        (700, 100, True),
        (515, None, False),
    ],
)
def test_fused_pairs_count_the_computed_tiles(n, window, causal):
    from llm_collapse.cost.estimate import fused_pairs

    assert fused_pairs(n, window, causal) == _tiles_by_hand(n, window, causal)


def test_softcap_model_runs_fused_on_cuda_and_chunked_costs_its_logit_traffic():
    fused, chunked = model_for("bge-gemma2"), model_for("bge-gemma2", "chunked")
    assert (fused.attention, chunked.attention) == ("fused", "chunked")
    slow, fast = text_cost(chunked, 32768, Assumptions()), text_cost(fused, 32768, Assumptions())
    assert fast.logit_bytes == 0 and slow.logit_bytes > 0
    assert fast.model_flops == slow.model_flops  # the same useful work
    # fused computes roughly the useful pairs (half the causal square, the band of the sliding layers)
    assert fast.model_flops <= fast.executed_flops < 1.05 * fast.model_flops
    assert slow.seconds > 5 * fast.seconds


def test_no_square_mask_is_counted_for_paths_that_build_none():
    from llm_collapse.cost.estimate import peak_bytes

    nv, bge = model_for("nv-embed"), model_for("bge-gemma2", "chunked")
    for plan in (nv, bge):  # memory grows linearly from 8k to 32k: no (n, n) term left
        small, large = (
            peak_bytes(plan, n, 1, overhead_gib=0) - plan.dims.params() * 2 for n in (8192, 32768)
        )
        assert large < 4.5 * small
    sdpa = ModelPlan("bge-sdpa", bge.dims, "sdpa", 1)  # transformers' sdpa_mask for the sliding layers
    assert (
        peak_bytes(sdpa, 32768, 1, overhead_gib=0) - peak_bytes(bge, 32768, 1, overhead_gib=0) > 32768**2 - 1
    )


def test_the_gpu_estimate_counts_the_socm_tasks_forwards_and_pairs():
    """socm runs every sample text's forward again (at its factor) and compares its pairs by d x d statistics,
    each costed as anchors 12.4's ~1 s at d = 4096, scaled as d^3 (e5-mistral: d = 4096)."""
    from llm_collapse.cost.estimate import PAIR_SECONDS_4096, to_markdown
    from llm_collapse.tasks.socm import FORWARD_AND_STATISTICS

    values = dict(models=["mistral"], methods=["base"], lengths=[512], max_per_bin=24)
    alone = estimate(CompareConfig.from_values({**values, "tasks": ["collapse"]}).validate())
    both = estimate(CompareConfig.from_values({**values, "tasks": ["collapse", "socm"]}).validate())
    assert both.pairs == 24 * 23 // 2 and both.passes == pytest.approx(24 * FORWARD_AND_STATISTICS)
    doc = text_cost(model_for("mistral"), 512, Assumptions())
    extra = both.passes * doc.seconds + both.pairs * PAIR_SECONDS_4096
    assert both.total_minutes == pytest.approx(alone.total_minutes + extra / 60)
    assert "276 pairs of d x d statistics" in to_markdown(both)
