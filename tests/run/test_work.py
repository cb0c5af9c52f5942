"""The progress ETA's work per text (`llm_collapse.run.work`): forward FLOPs from characters, capped where an
absolute-position model truncates, doubled for echo, all pairs for a bidirectional decoder."""

from __future__ import annotations

import json

import pytest

from llm_collapse.data.bins import BinnedText
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.work import text_costs
from llm_collapse.tasks.inputs import RunInputs
from llm_collapse.tasks.sample import CorpusSample


def _dense(config: dict, tokens: int, *, causal: bool) -> float:
    """2 x linear weights per token + 4 x attention channels per (query, key) pair in every layer, counted here
    from config.json by hand (no window: the tests stay within the tiny Gemma 3's 16 tokens)."""
    hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads", heads)
    inter = config["intermediate_size"]
    gated = config["model_type"] != "bert"
    attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    mlp = hidden * inter * (3 if gated else 2)
    pairs = tokens * tokens if not causal else tokens * (tokens + 1) // 2
    return 2.0 * layers * (attention + mlp) * tokens + 4.0 * heads * head_dim * layers * pairs


def test_minilm_is_capped_at_its_512_positions_and_counts_every_pair():
    from llm_collapse.run.models import model_weights

    config = CompareConfig(models=["minilm"]).validate()
    cost = text_costs(config, chars_per_token=4.0)["minilm"]
    layout = json.loads((model_weights("minilm", config).directory / "config.json").read_text())
    assert cost(400) == pytest.approx(_dense(layout, 100, causal=False))
    assert cost(4 * 512) == cost(4 * 5000) == pytest.approx(_dense(layout, 512, causal=False))


def test_a_causal_decoder_echo_and_a_bidirectional_decoder(tiny_gemma3_dir, tiny_gte_qwen2_dir):
    config = CompareConfig(
        models=["gemma3-270m", "echo-gemma3-270m", "gte-qwen2"],
        model_paths={
            "gemma3-270m": str(tiny_gemma3_dir),
            "echo-gemma3-270m": str(tiny_gemma3_dir),
            "gte-qwen2": str(tiny_gte_qwen2_dir),
        },
    ).validate()
    costs = text_costs(config, chars_per_token=2.0)
    gemma = json.loads((tiny_gemma3_dir / "config.json").read_text())
    gemma = {**gemma, **gemma.get("text_config", {})}
    assert costs["gemma3-270m"](16) == pytest.approx(_dense(gemma, 8, causal=True))
    assert costs["echo-gemma3-270m"](16) == pytest.approx(_dense(gemma, 16, causal=True))  # the text twice
    qwen = json.loads((tiny_gte_qwen2_dir / "config.json").read_text())
    assert costs["gte-qwen2"](20) == pytest.approx(_dense(qwen, 10, causal=False))


def test_a_model_that_cannot_be_priced_makes_the_eta_count_texts(monkeypatch, tiny_gemma3_dir):
    import llm_collapse.run.work as work

    def unreadable(weights):
        if weights.directory == tiny_gemma3_dir:
            raise ValueError("a config the FLOP formula does not know")
        return load_config(weights)

    load_config = work.load_config
    monkeypatch.setattr(work, "load_config", unreadable)
    config = CompareConfig(
        models=["minilm", "gemma3-270m"], model_paths={"gemma3-270m": str(tiny_gemma3_dir)}
    )
    assert text_costs(config.validate(), chars_per_token=4.0) is None  # not a mix of FLOPs and texts
    assert set(text_costs(CompareConfig(models=["minilm"]).validate(), chars_per_token=4.0)) == {"minilm"}


def test_chars_per_token_is_the_counted_texts_ratio():
    def binned(text: str, n: int) -> BinnedText:
        return BinnedText(
            text=text,
            bin="[0,8)",
            target_tokens=8,
            n_tokens=n,
            doc_id="d",
            labels={},
            source="s",
            tokenizer="t",
        )

    inputs = RunInputs(tokenizer="t", sample=CorpusSample([binned("abcdef", 2), binned("abcdefghij", 2)]))
    assert inputs.chars_per_token() == 16 / 4
    assert RunInputs(tokenizer="t").chars_per_token() == 4.0
