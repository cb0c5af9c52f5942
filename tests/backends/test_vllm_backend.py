"""backend="vllm" against backend="hf" on the same tiny checkpoints (head_dim 64, which vLLM's CPU kernels take).

Runs only in an environment with vLLM (``python -m pytest -m vllm tests/backends/test_vllm_backend.py``); see docs/vllm.md for
the optional vLLM install. Every engine start costs 5-30 s on 2 cores, so one engine per (model, dtype) serves all
base and TempScale checks (TempScale needs no restart), and only RoPE / window changes restart one.

The vLLM side is driven through the backend's own API (``embed`` on our `EncodedText`s, ``intervene``), with
the hf `Embedder` doing the tokenisation, so these tests do not depend on how `load_embedder` is wired; the
last test goes through ``load_embedder(..., backend="vllm")``.
"""

from __future__ import annotations

import contextlib
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from llm_collapse import load_embedder  # noqa: E402
from llm_collapse.adapters import resolve_spec  # noqa: E402
from llm_collapse.adapters.inputs import EncodedText  # noqa: E402
from llm_collapse.backends import BACKENDS  # noqa: E402
from llm_collapse.backends.vllm import (  # noqa: E402
    CPU_HEAD_SIZES,
    INSTALL_HINT,
    VLLMBackend,
    require_vllm,
)
from llm_collapse.backends.weights import resolve_weights  # noqa: E402
from llm_collapse.encoding.forward import collate  # noqa: E402
from llm_collapse.interventions import InterventionError, ModelContext, parse_interventions  # noqa: E402
from llm_collapse.testing import (  # noqa: E402
    save_tiny_bge_gemma2,
    save_tiny_e5_mistral,
    save_tiny_gemma3,
    save_tiny_gte_qwen2,
    save_tiny_nv_embed,
    save_tiny_qwen3_embedding,
)

# Lengths from a few tokens to well past the tiny models' 16-token sliding windows.
TEXTS = [
    "what is food?",
    "The passkey is 68217. Remember it. 68217 is the passkey.",
    " ".join(["the grass is green, the sky is blue, the sun is yellow."] * 6),
    "Document: the baby eats bread again!  Ünïcode ✓ (42) " * 3,
]
MIN_COSINE = 0.999
MIN_COSINE_BF16 = 0.997  # vLLM bf16 vs hf bf16; see _check
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# (embedder name, builder, builder overrides); e5's window is cut to 16 tokens so the texts cross it.
MODELS = {
    "e5": ("e5-mistral", save_tiny_e5_mistral, {"sliding_window": 16}),
    "bge": ("bge-gemma2", save_tiny_bge_gemma2, {"sliding_window": 16}),
    "gemma3": ("gemma3-270m", save_tiny_gemma3, {}),
    "qwen3": ("qwen3-embedding-0.6b", save_tiny_qwen3_embedding, {}),
    "gte": ("gte-qwen2", save_tiny_gte_qwen2, {}),  # bidirectional: hf_overrides is_causal false
}
CASES = [f"{model}-{dtype}" for model in MODELS for dtype in DTYPES]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _normalised(vectors: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(vectors, dim=-1).numpy()


class Pair:
    """A `VLLMBackend` and hf `Embedder`s on the same folder: one in the same dtype (which also tokenises for
    both) and, for bf16, an fp32 one as the accuracy reference."""

    def __init__(self, name: str, directory, dtype: torch.dtype) -> None:
        self.name, self.directory, self.dtype = name, directory, dtype
        self._embedders: dict = {}
        self.hf = self.embedder(name)
        spec = self.hf.spec
        self.context = ModelContext(name=spec.name, trained_length=spec.trained_length)
        # e5 in fp32 keeps vLLM's own engine-core and worker processes (LLM.apply_model then pickles the
        # scale function across processes); the others use the default in-process engine, which starts faster.
        env = (
            {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"} if (name, dtype) == ("e5-mistral", torch.float32) else {}
        )
        self.vllm = VLLMBackend(spec, self.hf.backend.weights, device="cpu", dtype=dtype, engine_env=env)
        self._active: list[str] = []

    def embedder(self, name: str, dtype: torch.dtype | None = None):
        key = (name, dtype or self.dtype)
        if key not in self._embedders:
            self._embedders[key] = load_embedder(name, path=self.directory, dtype=key[1], device="cpu")
        return self._embedders[key]

    def encode(self, texts, *, name=None, kind="document"):
        """(hf same dtype, vllm, hf fp32) vectors; ``name`` swaps in another spec on the same weights."""
        same = self.embedder(name or self.name)
        reference = self.embedder(name or self.name, torch.float32)
        items = same.tokenize(texts, kind=kind)
        ours = _normalised(self.vllm.embed(items, pooling=same.spec.pooling))
        vectors = []
        for embedder in (same, reference):
            with contextlib.ExitStack() as stack:
                for spec in self._active:
                    stack.enter_context(embedder.intervene(spec))
                vectors.append(embedder.encode(texts, kind=kind))
        return vectors[0], ours, vectors[1]

    @contextlib.contextmanager
    def intervene(self, spec: str):
        """``spec`` on the vLLM backend now, and on each hf embedder while `encode` runs it."""
        with self.vllm.intervene(parse_interventions(spec), self.context):
            self._active.append(spec)
            try:
                yield
            finally:
                self._active.remove(spec)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return {
        key: builder(tmp_path_factory.mktemp(f"vllm-{key}"), **overrides)
        for key, (_, builder, overrides) in MODELS.items()
    }


@pytest.fixture(scope="module", params=CASES)
def pair(request, model_dirs):
    """One engine per (model, dtype), shared by every test that takes it; closed when the group ends."""
    model, dtype = request.param.split("-")
    built = Pair(MODELS[model][0], model_dirs[model], DTYPES[dtype])
    built.case = request.param
    yield built
    built.vllm.close()
    assert built.vllm._engine is None


def _check(hf_vectors: np.ndarray, vllm_vectors: np.ndarray, reference: np.ndarray, what: str) -> float:
    """vLLM must match hf in fp32 to ``MIN_COSINE``. In bf16 it must match hf's fp32 vectors to
    ``MIN_COSINE`` and hf's bf16 vectors to ``MIN_COSINE_BF16``: on the tiny bge-gemma2, whose q/k are scaled
    up so that logits reach the softcap, hf's eager bf16 attention is itself only 0.998 from fp32 (vLLM's
    bf16 stays at 0.9998), so bf16-vs-bf16 measures hf's rounding, not vLLM's."""
    accuracy = _cosines(reference, vllm_vectors).min()
    agreement = _cosines(hf_vectors, vllm_vectors).min()
    print(f"{what}: min cosine vs hf fp32 {accuracy:.6f}, vs hf same dtype {agreement:.6f}")
    assert accuracy >= MIN_COSINE, f"{what}: min cosine to hf fp32 {accuracy:.6f}"
    assert agreement >= MIN_COSINE_BF16, f"{what}: min cosine to hf in the same dtype {agreement:.6f}"
    return float(agreement)


def _base(pair) -> np.ndarray:
    """The vLLM base vectors of TEXTS, computed once per engine group."""
    if getattr(pair, "base", None) is None:
        hf_vectors, pair.base, reference = pair.encode(TEXTS)
        _check(hf_vectors, pair.base, reference, f"{pair.case} documents")
    return pair.base


def test_base_agrees_with_hf(pair):
    _base(pair)
    if pair.hf.spec.input_format.takes_instruction:
        _check(*pair.encode(TEXTS, kind="query"), f"{pair.case} queries")


def test_last_token_inside_the_prompt_is_exact(pair):
    """LAST pooling reads the last pool-mask position even when tokens follow it (e5/bge: the prompt is cut
    there; gemma3's token-state engine reads that row)."""
    full = pair.hf.tokenize(TEXTS[2:3])[0]
    cut = len(full) // 2
    item = EncodedText(full.input_ids, tuple(int(i < cut) for i in range(len(full))))
    ours = _normalised(pair.vllm.embed([item], pooling="last"))
    theirs = []
    for embedder in (pair.hf, pair.embedder(pair.name, torch.float32)):
        with torch.inference_mode():
            ids, mask, _ = collate(embedder, [item])
            states = embedder.backend.forward(ids, mask).last_hidden_state
        theirs.append(_normalised(states[:, cut - 1].float()))
    _check(theirs[0], ours, theirs[1], f"{pair.case} last token at {cut - 1} of {len(full)}")


def test_tempscale_agrees_with_hf_and_restores(pair):
    base = _base(pair)
    specs = ["tempscale:0.8"]
    if pair.case.startswith("bge"):
        specs.append("tempscale:0.8:after")  # softcap scaled too: a true temperature after the cap
    for spec in specs:
        with pair.intervene(spec):
            hf_vectors, vllm_vectors, reference = pair.encode(TEXTS)
        _check(hf_vectors, vllm_vectors, reference, f"{pair.case} {spec}")
        assert _cosines(vllm_vectors, base).min() < 0.99999, f"{spec} changed nothing"
    _, restored, _ = pair.encode(TEXTS)
    np.testing.assert_allclose(restored, base, atol=1e-6)


def test_echo_and_mean_agree_with_hf(pair):
    """Echo (mean over the second copy) runs on the engine of its base model (gemma3: skip-bos mean)."""
    if not pair.case.startswith("gemma3"):
        pytest.skip("mean-pooled specs run on gemma3 (a mean request would restart e5/bge's LAST engine)")
    echo = "echo-gemma3-270m"
    assert pair.embedder(echo).spec.pooling == "mean" and pair.hf.spec.input_format.pool_span == "skip-bos"
    _check(*pair.encode(TEXTS, name=echo), f"{pair.case} echo")
    _check(*pair.encode(TEXTS, name=echo, kind="query"), f"{pair.case} echo queries")
    with pair.intervene("tempscale:0.8"):
        _check(*pair.encode(TEXTS, name=echo), f"{pair.case} echo tempscale:0.8")
    assert pair.vllm._engine.task == "token_embed"


@pytest.mark.parametrize("spec", ["ntk:1e5", "window:off"])
def test_rope_and_window_agree_with_hf(pair, spec):
    """Engine overrides (hf_overrides) restart the engine; fp32 only, e5 (Mistral) and gemma3 (RoPE and
    window per layer type)."""
    if not pair.case.endswith("fp32") or not pair.case.startswith(("e5", "gemma3")):
        pytest.skip("each restart costs ~20 s: checked on e5 and gemma3 in fp32")
    base = _base(pair)
    with pair.intervene(spec):
        hf_vectors, vllm_vectors, reference = pair.encode(TEXTS)
        overrides = json.loads(pair.vllm._engine.key[1])
    _check(hf_vectors, vllm_vectors, reference, f"{pair.case} {spec}")
    assert ("rope_parameters" if spec.startswith("ntk") else "sliding_window") in overrides
    assert _cosines(vllm_vectors, base).min() < 0.99999, f"{spec} changed nothing"


def test_unsupported_interventions_fail_before_any_engine(model_dirs):
    spec, _ = resolve_spec("e5-mistral")
    weights = resolve_weights(spec.name, None, "path", model_dirs["e5"])
    backend = VLLMBackend(spec, weights, device="cpu", dtype=torch.float32)
    context = ModelContext(name=spec.name, trained_length=spec.trained_length)
    for text, needle in [
        ("tempscale-log:512", "length"),
        ("selfextend:4:8", "computes attention itself"),
        ("dynamic:4", "static NTK"),
        ("tempscale:0.8:after", "softcap"),
    ]:
        with pytest.raises(InterventionError, match=needle):
            with backend.intervene(parse_interventions(text), context):
                pass
    assert backend._engine is None and backend._plans == []


def test_nv_embed_is_refused(tmp_path):
    directory = save_tiny_nv_embed(tmp_path / "nv")
    spec, _ = resolve_spec("nv-embed")
    with pytest.raises(ValueError, match="vLLM has no NV-Embed-v2 model") as info:
        VLLMBackend(spec, resolve_weights(spec.name, None, "path", directory), device="cpu")
    assert "\n" not in str(info.value)


def test_unsupported_head_size_is_refused_before_an_engine_starts(tmp_path, monkeypatch):
    assert 48 not in CPU_HEAD_SIZES
    directory = save_tiny_e5_mistral(tmp_path / "e5-48", head_dim=48)
    spec, _ = resolve_spec("e5-mistral")
    started = []
    monkeypatch.setattr("llm_collapse.backends.vllm.backend.Engine", lambda *a, **k: started.append(1))
    with pytest.raises(ValueError, match="head size 48"):
        VLLMBackend(spec, resolve_weights(spec.name, None, "path", directory), device="cpu")
    assert not started


def test_missing_vllm_gives_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(ImportError) as info:
        require_vllm()
    assert str(info.value) == INSTALL_HINT and "\n" not in INSTALL_HINT


def test_load_embedder_end_to_end(model_dirs):
    """Through the public API: load_embedder(..., backend="vllm")."""
    assert "vllm" in BACKENDS
    with pytest.raises(InterventionError, match="not supported on backend='vllm'"):
        load_embedder("e5-mistral", path=model_dirs["e5"], backend="vllm", interventions="tempscale-log:512")
    reference = load_embedder("e5-mistral", path=model_dirs["e5"], dtype="fp32", interventions="ntk:1e5")
    embedder = load_embedder(
        "e5-mistral", path=model_dirs["e5"], dtype="fp32", backend="vllm", interventions="ntk:1e5"
    )
    try:
        assert embedder.backend._engine is not None  # started at load, with the RoPE override
        expected = reference.encode(TEXTS)
        _check(expected, embedder.encode(TEXTS), expected, "load_embedder e5 fp32 ntk:1e5")
        with reference.intervene("tempscale:0.8"), embedder.intervene("tempscale:0.8"):
            expected = reference.encode(TEXTS)
            _check(expected, embedder.encode(TEXTS), expected, "load_embedder e5 ntk:1e5+tempscale:0.8")
        described = embedder.describe()
        assert described["backend"] == "vllm" and described["interventions"] == "ntk-theta1e5"
        assert described["rope_parameters"]["rope_theta"] == 1e5
        with pytest.raises(ValueError, match="pooled embeddings only"):
            next(embedder.iter_batches(TEXTS, output_hidden_states=True))
    finally:
        embedder.backend.close()
