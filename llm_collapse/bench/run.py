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
    from llm_collapse.records.results import environment
    from llm_collapse.utils.files import atomic_write, write_json

    started = time.perf_counter()
    dtype = dtype_name(resolve_dtype(config.dtype, torch.device("cpu")))
    logger.info("bench: dtype %s, models %s", dtype, ", ".join(config.models))
    # The peak only in the dtype every section runs in: a bf16 matmul on a CPU without bf16 instructions is
    # emulated (minutes at n=2048 on a 2-core AMD EPYC) and says nothing about an fp32 run.
    first = matmul_peak(dtype, n=config.peak_n, reps=config.peak_reps)
    logger.info("%s matmul peak %.0f GFLOP/s (start of run)", dtype, first["flops_per_s"] / 1e9)
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
    last = matmul_peak(dtype, n=config.peak_n, reps=config.peak_reps)
    peak = {
        **max(first, last, key=lambda p: p["flops_per_s"]),
        "runs_flops_per_s": [first["flops_per_s"], last["flops_per_s"]],
    }
    logger.info("%s matmul peak %.0f GFLOP/s (best of start and end)", dtype, peak["flops_per_s"] / 1e9)
    for row in rows:
        for side in row["sides"].values():
            side["fraction_of_peak"] = side["flops_per_s"] / peak["flops_per_s"]
    for row in flop_rows + long_rows + replica_rows:
        if "flops_per_s" in row:
            row["fraction_of_peak"] = row["flops_per_s"] / peak["flops_per_s"]
    result = {
        "schema": SCHEMA,
        "command": command,
        "settings": {**config.describe(), "dtype_resolved": dtype},
        "environment": environment(),
        "versions": {
            "sentence-transformers": package_version("sentence-transformers"),
            "psutil": package_version("psutil"),
        },
        "peak": {dtype: peak},  # keyed by dtype: the run's own, the one every fraction_of_peak divides by
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
