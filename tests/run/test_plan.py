"""``--dry-run`` says before the run what it will not do as asked: where a model truncates (and costs the
truncated lengths), and which methods do not apply to a model (and costs them nothing)."""

from __future__ import annotations

import random

import pytest

from llm_collapse.run.config import CompareConfig
from llm_collapse.run.plan import plan

pytestmark = pytest.mark.usefixtures("private_cache")

WORDS = "river stone light paper window garden silver morning letter forest harbour candle".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three one-paragraph documents of ~3000 words: every prefix design starts them at their first token."""
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("corpus")
    for doc in range(3):
        (root / f"doc{doc}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(3000)) + "\n")
    return f"folder:{root}"


@pytest.fixture(autouse=True)
def one_rate(monkeypatch):
    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "100")  # no benchmark; seconds ~ FLOPs


def _plan(corpus, tmp_path, *, methods, lengths, models=("minilm",), **extra) -> tuple[str, float]:
    config = CompareConfig(
        models=list(models), methods=list(methods), tasks=["collapse"], corpus=corpus, lengths=list(lengths),
        design="prefix", prefix_docs=2, out=str(tmp_path / "run"), **extra,
    ).validate()  # fmt: skip
    return plan(config)


def test_lengths_past_minilms_positions_say_so_and_cost_512_tokens(corpus, tmp_path):
    text, seconds = _plan(corpus, tmp_path, methods=["base"], lengths=[64, 1024, 2048])
    assert (
        "  minilm: truncates inputs at 512 tokens, special tokens included (its position table): "
        "the 1024- and 2048-token texts cost 512 tokens of work each"
    ) in text
    # the same documents cut at 1024 or at 2048 tokens cost one 512-token forward each
    _, shorter = _plan(corpus, tmp_path, methods=["base"], lengths=[64, 1024, 1024 + 8])
    assert seconds == pytest.approx(shorter, rel=1e-12)
    # and a 2048-token forward would cost at least 4x a 512-token one (2 x parameters x tokens, plus attention)
    _, short = _plan(corpus, tmp_path, methods=["base"], lengths=[64, 512])
    assert seconds < 3 * short


def test_no_truncation_line_within_the_positions(corpus, tmp_path):
    text, _ = _plan(corpus, tmp_path, methods=["base"], lengths=[64, 256])
    assert "truncates" not in text


def test_methods_that_do_not_apply_are_listed_and_cost_nothing(corpus, tmp_path):
    text, seconds = _plan(corpus, tmp_path, methods=["base", "ntk:4e6", "yarn:4"], lengths=[64, 256])
    assert (
        "  minilm x ntk:4e6: not applicable, not run (ntk-theta4e6 needs a RoPE model; minilm has no rotary "
        "embedding (absolute positions)); run.json and the report say so"
    ) in text
    assert "  minilm x yarn:4: not applicable, not run (" in text
    assert "minilm x ntk:4e6: 4 prefix-sweep" not in text and "minilm x base: 4 prefix-sweep forwards" in text
    _, base = _plan(corpus, tmp_path, methods=["base"], lengths=[64, 256])
    assert seconds == pytest.approx(base, rel=1e-12)


def test_a_rope_model_runs_rope_methods_and_is_not_truncated(corpus, tmp_path, tiny_dir):
    replica = str(tiny_dir("gemma3-270m"))
    text, seconds = _plan(
        corpus, tmp_path, models=["gemma3-270m"], model_paths={"gemma3-270m": replica},
        methods=["base", "ntk:4e6", "pcw:64"], lengths=[64, 1024],
    )  # fmt: skip
    assert (
        "not applicable" in text and "gemma3-270m x pcw:64: not applicable, not run (pcw-64 extends" in text
    )
    assert "gemma3-270m x ntk:4e6: 2 prefix-sweep forwards" in text and "truncates" not in text
    _, base = _plan(
        corpus, tmp_path, models=["gemma3-270m"], model_paths={"gemma3-270m": replica},
        methods=["base"], lengths=[64, 1024],
    )  # fmt: skip
    assert seconds == pytest.approx(2 * base, rel=1e-12)  # base and ntk, pcw costs nothing
