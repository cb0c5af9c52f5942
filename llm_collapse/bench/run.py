"""`run_bench`: every section in one run, then ``bench.json`` and ``bench.md``."""

from __future__ import annotations

import gc
import logging
import time
from pathlib import Path

from llm_collapse.bench.config import SCHEMA, BenchConfig
from llm_collapse.bench.long_docs import long_documents
from llm_collapse.bench.render import render_markdown
from llm_collapse.bench.replicas import replica_documents
from llm_collapse.bench.sides import fixed_length_flops, throughput
from llm_collapse.bench.targets import contention, evaluate_targets
from llm_collapse.cost.rate import matmul_peak
from llm_collapse.utils.optional import package_version

logger = logging.getLogger("llm_collapse.bench")


def run_bench(config: BenchConfig, *, command: str = "python -m llm_collapse.bench") -> dict:
    """Runs every section and writes ``bench.json`` and ``bench.md`` under ``config.out``.

    Returns:
        The JSON document (also written to ``config.out / "bench.json"``).
    """
    import torch

    import llm_collapse as lc
    from llm_collapse.backends.device import dtype_name, resolve_dtype
    from llm_collapse.data import load_corpus
    from llm_collapse.run.results import environment
    from llm_collapse.utils.files import atomic_write, write_json

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
    replica_rows = replica_documents(documents, config, dtype)

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
    for row in flop_rows + long_rows + replica_rows:
        if "flops_per_s" in row:
            row["fraction_of_bf16_peak"] = row["flops_per_s"] / bf16_peak
    result = {
        "schema": SCHEMA,
        "command": command,
        "settings": {**config.describe(), "dtype_resolved": dtype},
        "environment": environment(),
        "versions": {
            "sentence-transformers": package_version("sentence-transformers"),
            "psutil": package_version("psutil"),
        },
        "peak": peaks,
        "throughput": rows,
        "flops": flop_rows,
        "long_documents": long_rows,
        "replica_documents": replica_rows,
        "wall_seconds": time.perf_counter() - started,
    }
    result["targets"] = [t.describe() for t in evaluate_targets(result)]
    result["contention"] = contention(result)
    out = Path(config.out)
    write_json(result, out / "bench.json")
    markdown = render_markdown(result)
    atomic_write(out / "bench.md", lambda tmp: Path(tmp).write_text(markdown, encoding="utf-8"))
    logger.info("wrote %s and %s", out / "bench.json", out / "bench.md")
    return result
