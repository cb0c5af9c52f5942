"""`llm_collapse.bench.device_check`: the layer-cost fit, the replicas' dims, and a quick run on the CPU."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import Gemma2Config, MistralConfig

from llm_collapse.adapters import resolve_spec
from llm_collapse.bench.cli import main
from llm_collapse.bench.device_check import DeviceCheckConfig, fit_layer_cost, run_device_check
from llm_collapse.bench.device_pairs import mixed_lengths
from llm_collapse.bench.device_replicas import replica_fields


def test_fit_recovers_per_layer_and_fixed_cost():
    fixed, per_layer = 0.25, 0.04
    fit = fit_layer_cost(1, fixed + per_layer, 3, fixed + 3 * per_layer, 42)
    assert fit["per_layer_s"] == pytest.approx(per_layer)
    assert fit["fixed_s"] == pytest.approx(fixed)
    assert fit["full_depth_s"] == pytest.approx(fixed + 42 * per_layer)


def test_replicas_have_the_published_widths():
    bge = Gemma2Config(**replica_fields("bge-gemma2", 3))
    dims = resolve_spec("bge-gemma2")[0].published
    assert (bge.hidden_size, bge.intermediate_size, bge.num_attention_heads) == (3584, 14336, 16)
    assert (
        (bge.num_key_value_heads, bge.head_dim, bge.sliding_window)
        == (8, 256, 4096)
        == (dims.kv_heads, dims.head_dim, dims.window)
    )
    assert bge.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]  # as published
    mistral = MistralConfig(**replica_fields("mistral", 1))
    assert (mistral.hidden_size, mistral.num_key_value_heads, mistral.sliding_window) == (4096, 8, 4096)
    nv = replica_fields("nv-embed", 2)
    assert (nv["num_latents_value"], nv["num_cross_heads"], nv["cross_dim_head"]) == (512, 8, 4096)
    assert replica_fields("mistral", 2, quick=True) == {
        "num_hidden_layers": 2,
        "max_position_embeddings": 32768,
    }


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_quick_check_writes_its_json(tmp_path, monkeypatch):
    from llm_collapse.backends import fused_attention

    monkeypatch.setattr(
        fused_attention, "COMPILE", False
    )  # torch's unfused reference path of flex: no compiling
    config = DeviceCheckConfig(
        models=("mistral", "bge-gemma2"), lengths=(48, 96), layers=(1, 2), device="cpu", dtype="fp32",
        quick=True, out=tmp_path,
    )  # fmt: skip
    result = run_device_check(config, command="test")
    written = json.loads((tmp_path / "device_check.json").read_text())
    assert written["rows"] == json.loads(json.dumps(result["rows"]))
    assert [(r["model"], r["length"], r["status"]) for r in written["rows"]] == [
        ("mistral", 48, "ok"), ("mistral", 96, "ok"), ("bge-gemma2", 48, "ok"), ("bge-gemma2", 96, "ok")
    ]  # fmt: skip
    for row in written["rows"]:
        t1, t2 = row["seconds"]["1"], row["seconds"]["2"]
        assert t1 > 0 and t2 > 0
        assert row["full_depth_s"] == pytest.approx(t1 + (row["layers_published"] - 1) * (t2 - t1))
    assert {r["attention"] for r in written["rows"] if r["model"] == "bge-gemma2"} == {"chunked"}
    first = {row["side"]: row for row in written["first_encode"]}
    assert first["ours"]["status"] == "ok" and first["ours"]["first_s"] > 0
    if importlib.util.find_spec("sentence_transformers"):
        assert first["st"]["status"] == "ok" and first["st"]["warm_s"] > 0
    softcap = written["softcap_paths"]
    assert softcap["status"] == "ok" and softcap["length"] == 96 and softcap["layers"] == 1
    assert softcap["fused"]["attention"] == "fused" and softcap["chunked"]["attention"] == "chunked"
    assert softcap["cosine"] > 0.9999  # the same exact softcap on both paths (fp32 here)
    pair = written["st_against_encode"]
    if importlib.util.find_spec("sentence_transformers"):
        assert pair["status"] == "ok" and pair["texts"] == len(mixed_lengths(88))
        ours, theirs = pair["sides"]["ours"], pair["sides"]["sentence_transformers"]
        assert ours["tokens"] > 0 and theirs["tokens"] > 0 and ours["seconds"] > 0
        assert pair["ours_over_st_tokens_per_s"] == pytest.approx(
            ours["tokens_per_s"] / theirs["tokens_per_s"]
        )


def test_mixed_lengths_mix_short_and_long_texts():
    assert mixed_lengths(300) == [64, 64, 64, 64, 128, 128, 256, 256]  # padded to 8 texts
    assert mixed_lengths(32760) == sorted([2**k for k in range(6, 15)] * 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--device-check", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a CUDA GPU" in err[0] and "--quick" in err[0]
    assert not (tmp_path / "device_check.json").exists()
