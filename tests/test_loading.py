"""load_embedder: weight resolution, version and layout guards, dtype/quantization options, bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import llm_collapse as lc
from llm_collapse.backends.device import resolve_dtype


def test_missing_weights_offline_is_one_line_naming_id_path_and_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(FileNotFoundError) as info:
        lc.load_embedder("mistral")
    message = str(info.value)
    assert "\n" not in message
    for part in (
        "intfloat/e5-mistral-7b-instruct",
        "path=",
        "HF_HUB_OFFLINE",
        "hf download intfloat/e5-mistral-7b-instruct --revision 07163b72a",
    ):
        assert part in message


def test_bad_path_is_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        lc.load_embedder("mistral", path=tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        lc.load_embedder("mistral", path=tmp_path)


def test_unsupported_transformers_version_is_refused_before_loading(tiny_e5_dir, monkeypatch):
    from llm_collapse.backends import hf

    monkeypatch.setattr(hf.transformers, "__version__", "4.42.4")
    with pytest.raises(RuntimeError, match=r"supports transformers .*4\.42\.4 is installed"):
        lc.load_embedder("nv-embed", path=tiny_e5_dir)


def test_wrong_architecture_for_the_name_is_refused(tiny_e5_dir):
    with pytest.raises(ValueError, match="'mistral' model; 'bge-gemma2' expects 'gemma2'"):
        lc.load_embedder("bge-gemma2", path=tiny_e5_dir)


def test_checkpoint_missing_a_weight_is_refused(tiny_e5_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_e5_dir, broken)
    tensors = load_file(broken / "model.safetensors")
    del tensors["layers.1.mlp.down_proj.weight"]
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="refusing to embed with randomly initialised weights"):
        lc.load_embedder("mistral", path=broken)


def test_nv_embed_checkpoint_with_extra_weight_is_refused(tiny_nv_embed_dir, tmp_path):
    broken = tmp_path / "nv"
    shutil.copytree(tiny_nv_embed_dir, broken)
    tensors = load_file(broken / "model.safetensors")
    tensors["latent_attention_model.extra.weight"] = torch.zeros(2)
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="extra"):
        lc.load_embedder("nv-embed", path=broken)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "onnx"}, "Unknown backend 'onnx'; available: hf"),
        ({"quantization": "gptq"}, "Unknown quantization 'gptq'; allowed: None, nf4, int8"),
        ({"dtype": "fp8"}, "Unknown dtype 'fp8'"),
        ({"pooling": "max"}, "Unknown pooling 'max'"),
        ({"max_length": 1}, "max_length must be an integer >= 2"),
    ],
)
def test_bad_options_are_one_line_errors(tiny_e5_dir, kwargs, match):
    with pytest.raises(ValueError, match=match):
        lc.load_embedder("mistral", path=tiny_e5_dir, **kwargs)


def test_default_cpu_dtype_is_bf16_only_with_amx(tiny_e5_dir):
    from pathlib import Path

    amx = "amx_bf16" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else False
    embedder = lc.load_embedder("mistral", path=tiny_e5_dir, device="cpu")
    expected = torch.bfloat16 if amx else torch.float32  # AVX512-BF16 alone runs bf16 slower than fp32
    assert embedder.backend.dtype == expected == resolve_dtype(None, torch.device("cpu"))
    assert next(embedder.model.parameters()).dtype == expected
    assert embedder.describe()["dtype"] in {"bf16", "fp32"}


def test_run_json_names_the_cpu_kind():
    """Timings are quoted with the CPU kind: run.json's hardware carries the model name and bf16 instructions."""
    import re
    from pathlib import Path

    from llm_collapse.records.results import environment

    hardware = environment()["hardware"]
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    names = re.findall(r"^model name\s*:\s*(.*?)\s*$", cpuinfo, flags=re.M)
    assert hardware["cpu_model"] == (names[0] if names else None)
    first_flags = re.search(r"^flags\s*:(.*)$", cpuinfo, flags=re.M)
    flags = first_flags.group(1).split() if first_flags else []
    assert set(hardware["cpu_bf16"]) == {f for f in ("amx_bf16", "avx512_bf16") if f in flags}


def test_no_lm_head_is_loaded_for_causal_checkpoints(tiny_mistral_instruct_dir):
    embedder = lc.load_embedder("echo-mistral", path=tiny_mistral_instruct_dir, dtype="fp32")
    assert type(embedder.model).__name__ == "MistralModel"
    assert not any("lm_head" in name for name, _ in embedder.model.named_parameters())


@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_bitsandbytes_quantization_on_cpu(tiny_e5_dir, quantization):
    pytest.importorskip("bitsandbytes", reason="pip install 'llm-collapse[quant]'")
    import bitsandbytes as bnb

    texts = ["quantized weights still embed", "a second text"]
    reference = lc.load_embedder("mistral", path=tiny_e5_dir, dtype="fp32").encode(texts)
    embedder = lc.load_embedder("mistral", path=tiny_e5_dir, dtype="fp32", quantization=quantization)
    layer = bnb.nn.Linear4bit if quantization == "nf4" else bnb.nn.Linear8bitLt
    assert any(isinstance(m, layer) for m in embedder.model.modules())
    got = embedder.encode(texts)
    assert np.isfinite(got).all()
    assert (got * reference).sum(1).min() > 0.9  # quantization moves tiny random weights a little
    assert embedder.describe()["quantization"] == quantization


def test_int8_cast_warning_is_logged_once_not_per_matmul(tiny_e5_dir, caplog):
    """bitsandbytes warns on every int8 matmul of fp32 inputs; a run logs it once."""
    pytest.importorskip("bitsandbytes", reason="pip install 'llm-collapse[quant]'")
    import logging

    from llm_collapse.backends import hf

    cast_logger = logging.getLogger(hf.BNB_CAST_LOGGER)
    for old in [f for f in cast_logger.filters if isinstance(f, hf._FirstOfEach)]:
        cast_logger.removeFilter(old)  # an earlier test's filter has already seen the message
    embedder = lc.load_embedder("mistral", path=tiny_e5_dir, dtype="fp32", quantization="int8")
    with caplog.at_level(logging.WARNING, logger=hf.BNB_CAST_LOGGER):
        for text in ["one text", "another text", "a third text"]:
            embedder.encode([text])
    casts = [r for r in caplog.records if r.name == hf.BNB_CAST_LOGGER]
    # without the filter: one record per int8 matmul of every forward (fp32 inputs on every device)
    assert len(casts) <= 1
    other = logging.LogRecord(hf.BNB_CAST_LOGGER, logging.WARNING, "", 0, "another message %s", ("x",), None)
    assert cast_logger.filters[-1].filter(other) and not cast_logger.filters[-1].filter(other)


@pytest.mark.usefixtures("private_cache")
def test_gguf_path_is_converted_once_and_cached(tiny_gemma3_dir, tmp_path):
    gguf = pytest.importorskip("gguf")
    del gguf
    from llm_collapse.backends.gguf import converted_gguf_dir

    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        converted_gguf_dir(tmp_path / "missing.gguf")


def test_model_card_config_fields_are_recorded(tiny_nv_embed_dir):
    config = json.loads((tiny_nv_embed_dir / "config.json").read_text())
    assert config["model_type"] == "nvembed" and "auto_map" in config  # remote code is present but never run
    embedder = lc.load_embedder("nv-embed", path=tiny_nv_embed_dir, dtype="fp32")
    assert type(embedder.model).__module__ == "llm_collapse.models.nv_embed"


def test_nv_embed_nf4_keeps_the_pooler_in_full_precision(tiny_nv_embed_dir):
    pytest.importorskip("bitsandbytes", reason="pip install 'llm-collapse[quant]'")
    import bitsandbytes as bnb

    embedder = lc.load_embedder("nv-embed", path=tiny_nv_embed_dir, dtype="fp32", quantization="nf4")
    pooler = embedder.model.latent_attention_model
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in pooler.modules())
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in embedder.model.embedding_model.modules())
    assert np.isfinite(embedder.encode(["x y z"])).all()


def test_import_needs_neither_vllm_nor_bitsandbytes():
    import subprocess
    import sys

    code = "import sys; sys.modules['vllm'] = None; sys.modules['bitsandbytes'] = None; import llm_collapse; print('ok')"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "ok"
    )


def test_vllm_backend_without_vllm_is_one_line_naming_the_extra(tiny_e5_dir):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ImportError) as info:
        lc.load_embedder("mistral", path=tiny_e5_dir, backend="vllm")
    assert "\n" not in str(info.value) and "llm-collapse[vllm]" in str(info.value)


def test_a_cached_snapshot_of_another_commit_is_used_with_a_warning(tmp_path, monkeypatch, caplog):
    """The spec's pinned revision is what a download fetches; offline, a cached snapshot of another commit
    still loads, and the warning names both commits (a fake Hugging Face cache, no network)."""
    import huggingface_hub.constants

    from llm_collapse.backends.weights import resolve_weights

    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level("WARNING", logger="llm_collapse.backends.weights"):
        pinned = resolve_weights("tiny", "org/tiny", "hub", None, revision="abc123")
        assert not caplog.records
        other = resolve_weights("tiny", "org/tiny", "hub", None, revision="def456")
    assert pinned.directory == other.directory == repo / "snapshots" / "abc123"
    (warning,) = caplog.records
    assert "commit abc123, not the one its spec pins (def456)" in warning.getMessage()
