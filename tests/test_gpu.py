"""CUDA against the CPU (``pytest -m gpu``; also step 1 of ``python -m llm_collapse.bench --device-check``).

The ``gpu`` marker is deselected by default and these tests skip without CUDA. The comparison helper itself runs
CPU against CPU in the default suite (`test_agreement_helper_on_the_cpu`), so a broken helper fails here too.
Thresholds (issue 15): fp32 cos >= 0.99999, bf16 >= 0.995 to the CPU fp32 result; nf4/int8 as on the CPU
(`test_loading.test_bitsandbytes_quantization_on_cpu`); peak CUDA memory at most 2.2x per doubling from 8k to 32k.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import llm_collapse as lc
from llm_collapse.interventions.base import NotApplicable
from llm_collapse.testing import checkpoints
from llm_collapse.testing.specs import INTERVENTION_MATRIX

CUDA = torch.cuda.is_available()

ADAPTERS = {  # registry name -> tiny replica builder in its published layout
    "mistral": "save_tiny_e5_mistral",
    "nv-embed": "save_tiny_nv_embed",
    "bge-gemma2": "save_tiny_bge_gemma2",
    "echo-mistral": "save_tiny_mistral_instruct",
    "gemma3-270m": "save_tiny_gemma3",
    "qwen3-embedding-0.6b": "save_tiny_qwen3_embedding",
    "gte-qwen2": "save_tiny_gte_qwen2",
}
METHODS = ["base", *INTERVENTION_MATRIX, "window:off"]
TEXTS = [
    "the grass is green and the sky is blue " * 6,
    "a short text",
    "here we go, there and back again " * 4,
]


@functools.cache
def _replica(name: str, root: str) -> str:
    return str(getattr(checkpoints, ADAPTERS[name])(f"{root}/{name}"))


@functools.cache
def _embedder(path: str, name: str, device: str, dtype: str, quantization: str | None = None):
    return lc.load_embedder(name, path=path, device=device, dtype=dtype, quantization=quantization)


def min_cosine(reference: np.ndarray, other: np.ndarray) -> float:
    """Smallest row-wise cosine between two (texts, dims) arrays."""
    a = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    b = other / np.linalg.norm(other, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def agreement(path: str, name: str, method: str, device: str, dtype: str) -> float:
    """Min cosine of ``name`` on ``device``/``dtype`` under ``method`` to the CPU fp32 result (skips if the
    method does not apply to the model)."""
    results = []
    for dev, dt in (("cpu", "fp32"), (device, dtype)):
        embedder = _embedder(path, name, dev, dt)
        try:
            with embedder.intervene(method):
                results.append(embedder.encode(TEXTS, show_progress_bar=False))
        except NotApplicable as err:
            pytest.skip(f"{method} on {name}: {err}")
    return min_cosine(*results)


@pytest.fixture(scope="module")
def replica_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gpu-replicas"))


def test_agreement_helper_on_the_cpu(replica_root):
    path = _replica("mistral", replica_root)
    assert agreement(path, "mistral", "tempscale:0.6", "cpu", "fp32") == pytest.approx(1.0, abs=1e-6)
    # and it sees a real difference: the intervention against the base embeddings
    base = _embedder(path, "mistral", "cpu", "fp32").encode(TEXTS, show_progress_bar=False)
    with _embedder(path, "mistral", "cpu", "fp32").intervene("tempscale:0.3"):
        changed = _embedder(path, "mistral", "cpu", "fp32").encode(TEXTS, show_progress_bar=False)
    assert min_cosine(base, changed) < 0.99999


@pytest.mark.parametrize("dtype, threshold", [("fp32", 0.99999), ("bf16", 0.995)])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", sorted(ADAPTERS))
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_every_adapter_and_intervention_matches_the_cpu(replica_root, name, method, dtype, threshold):
    path = _replica(name, replica_root)
    assert agreement(path, name, method, "cuda", dtype) >= threshold


@pytest.mark.parametrize("quantization", ["nf4", "int8"])
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_bitsandbytes_on_cuda(replica_root, quantization):
    pytest.importorskip("bitsandbytes")
    path = _replica("mistral", replica_root)
    reference = _embedder(path, "mistral", "cpu", "fp32").encode(TEXTS, show_progress_bar=False)
    quantized = _embedder(path, "mistral", "cuda", "bf16", quantization)
    assert quantized.describe()["quantization"] == quantization
    assert min_cosine(reference, quantized.encode(TEXTS, show_progress_bar=False)) > 0.9


@pytest.mark.parametrize(
    "name, attention", [("bge-gemma2", None), ("bge-gemma2", "chunked"), ("nv-embed", None)]
)
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_peak_cuda_memory_grows_linearly_from_8k_to_32k(tmp_path, name, attention):
    from llm_collapse.bench.device_replicas import synthetic_document

    path = getattr(checkpoints, ADAPTERS[name])(tmp_path / name, max_position_embeddings=32768)
    embedder = lc.load_embedder(
        name, path=path, device="cuda", dtype="bf16", max_length=32768, attn_implementation=attention
    )
    growth = {}
    for length in (8192, 32768):
        text = synthetic_document(embedder.tokenizer, length - 8)
        embedder.encode([text], show_progress_bar=False)  # warm-up (a compiled kernel compiles here)
        torch.cuda.synchronize()
        resting = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        embedder.encode([text], show_progress_bar=False)
        growth[length] = torch.cuda.max_memory_allocated() - resting
    assert growth[32768] <= 2.2**2 * growth[8192], growth
