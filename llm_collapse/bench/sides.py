"""The compared sides (ours, sentence-transformers, naive loop): mixed-corpus throughput and fixed-length FLOP/s."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from llm_collapse.bench.config import SIDES, ST_BATCH_SIZE, BenchConfig
from llm_collapse.bench.corpus import exact_length_texts, mixed_texts
from llm_collapse.cost.timing import timed
from llm_collapse.models.flops import FlopModel
from llm_collapse.utils.optional import package_version

logger = logging.getLogger("llm_collapse.bench")


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
        "sentence_transformers": package_version("sentence-transformers"),
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
    """Embedder vs sentence-transformers vs naive loop on the mixed corpus for one model.

    Long because the three sides are timed in one place, in one order, on the same warm model, so that the
    ratios it reports compare like with like (a helper per side would hide the shared warm-up and order).
    """
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
            with timed(timing):
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
            with timed(timing):
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
