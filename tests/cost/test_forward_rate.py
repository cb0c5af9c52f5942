"""The plan's per-model rate (`llm_collapse.cost.forward_rate`): a replica of one period of the model's layers,
and the split of its time into seconds per linear and per attention FLOP."""

from __future__ import annotations

import json

import pytest
import torch

from llm_collapse.cost.forward_rate import ForwardTiming, _replica_config, _split, time_replica
from llm_collapse.models.flops import FlopModel


def test_split_recovers_both_rates_and_falls_back_to_one_when_noise_makes_one_negative():
    linear, attention = [10.0, 40.0], [1.0, 16.0]
    a, b = 2e-3, 5e-3
    seconds = [a * lin + b * att for lin, att in zip(linear, attention, strict=True)]
    timing = _split(seconds, linear, attention, "x")
    assert timing.per_linear_flop == pytest.approx(a) and timing.per_attention_flop == pytest.approx(b)
    noisy = _split([1.0, 1.0], linear, attention, "x")  # longer not slower: no positive split
    assert noisy.per_linear_flop == noisy.per_attention_flop == pytest.approx(2.0 / 67.0)
    assert noisy.how.endswith("(one rate: the split was not resolvable)")


def test_seconds_and_rate_of_the_full_model_from_its_flop_split():
    model = FlopModel(linear_params=100, d_attn=8, layer_windows=(None, None), causal=True)
    timing = ForwardTiming(per_linear_flop=1e-9, per_attention_flop=4e-9, how="x")
    linear, attention = 2.0 * 100 * 10, 2 * 2 * 8 * 2 * 55  # 2 P n; 4 d_attn per pair, 55 pairs in 2 layers
    assert timing.seconds(model, 10) == pytest.approx(1e-9 * linear + 4e-9 * attention)
    assert timing.gflops(model, [10]) == pytest.approx(model.flops(10) / timing.seconds(model, 10) / 1e9)


def test_gemma3_replica_is_one_period_of_its_layer_types_with_a_small_vocabulary():
    from llm_collapse.backends.weights import load_config
    from llm_collapse.run.config import CompareConfig
    from llm_collapse.run.models import model_weights

    config = load_config(model_weights("gemma3-270m", CompareConfig(models=["gemma3-270m"]).validate()))
    replica, layers = _replica_config(config)
    assert layers == 6 and replica["num_hidden_layers"] == 6
    assert replica["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert replica["vocab_size"] == 1024 and replica["hidden_size"] == config["hidden_size"]
    _, one = _replica_config({"model_type": "bert", "num_hidden_layers": 6, "vocab_size": 30522})
    assert one == 1  # no layer types: one layer


@pytest.mark.parametrize("bidirectional", [False, True])
def test_a_tiny_replica_is_timed_on_the_cpu(tiny_gemma3_dir, bidirectional):
    config = json.loads((tiny_gemma3_dir / "config.json").read_text())
    timing = time_replica(
        config, dtype=torch.float32, device="cpu", bidirectional=bidirectional, lengths=(16, 64)
    )
    assert timing.per_linear_flop > 0 and timing.per_attention_flop > 0
    assert "random replica timed at 16 and 64 tokens" in timing.how
