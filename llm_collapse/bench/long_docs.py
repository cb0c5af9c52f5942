"""Long documents: one document per length in a fresh ``--worker`` process (hf, and vLLM when importable)."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llm_collapse.bench.config import VLLM_NOT_INSTALLED, BenchConfig
from llm_collapse.bench.corpus import long_document
from llm_collapse.cost.timing import RssPoller, maxrss_bytes, timed
from llm_collapse.models.flops import FlopModel

logger = logging.getLogger("llm_collapse.bench")


def worker(spec: dict) -> dict:
    """Runs in a fresh process: load, warm up, time one forward of exactly ``spec['length']`` tokens.

    The backend is ``spec['backend']`` (``"hf"``, or ``"vllm"`` through `llm_collapse.load_embedder`, whose
    RSS then includes vLLM's worker processes). Optional keys: ``path`` (local weights, e.g. a tiny replica),
    ``attn_implementation``, ``warmup: "full"`` to warm up on the timed text itself (a compiled kernel then
    compiles for that shape before the clock and the memory baseline start), and ``socm: true`` to time the
    forward with the socm task's statistics of its token cloud (`llm_collapse.tasks.socm.CloudCollector`).
    """
    import torch

    import llm_collapse as lc

    text = Path(spec["text_file"]).read_text(encoding="utf-8")
    children = spec["backend"] != "hf"
    load_start = time.perf_counter()
    embedder = lc.load_embedder(
        spec["model"],
        backend=spec["backend"],
        dtype=spec["dtype"],
        max_length=max(spec["length"], 2),
        path=spec.get("path"),
        attn_implementation=spec.get("attn_implementation"),
    )
    load_s = time.perf_counter() - load_start
    n_tokens = len(embedder.tokenize([text])[0])
    warmup = text if spec.get("warmup") == "full" else text[:200]
    embedder.encode([warmup], show_progress_bar=False)  # warm-up: kernels, allocator, thread pool
    gc.collect()
    baseline = RssPoller(children=children).rss()
    maxrss_before = maxrss_bytes()
    reps = 3 if spec["length"] <= 4096 else 1
    runs: list[dict] = []
    observed, collector = contextlib.nullcontext(), None
    if spec.get("socm"):
        from llm_collapse.tasks.socm import CloudCollector

        collector = CloudCollector(64, 0, embedder.spec.pooling)
        observed = embedder.observe_tokens(collector)
    with RssPoller(children=children) as poller, observed:
        for _ in range(reps):
            timing: dict = {}
            with timed(timing):
                embedder.encode([text], show_progress_bar=False)
                if collector is not None:
                    collector.clouds()  # the text's clouds, as the task builds them
            runs.append(timing)
    best = min(runs, key=lambda r: r["seconds"])
    maxrss_after = maxrss_bytes()
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
    model = embedder.backend.torch_model  # None for vLLM (the model runs in the engine process)
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
    model: str,
    dtype: str,
    length: int,
    text: str,
    *,
    backend: str,
    timeout: float,
    python: str | None = None,
    options: dict | None = None,
) -> dict:
    """Runs `worker` in a fresh ``python -m llm_collapse.bench --worker`` process and returns its row.

    ``options``: the worker's optional keys (``path``, ``attn_implementation``, ``warmup``).
    """
    row: dict = {"model": model, "backend": backend, "length": length}
    with tempfile.TemporaryDirectory(prefix="llm-collapse-bench-") as tmp:
        text_file, out_file, spec_file = (Path(tmp) / n for n in ("text.txt", "out.json", "spec.json"))
        text_file.write_text(text, encoding="utf-8")
        spec = {"model": model, "dtype": dtype, "length": length, "backend": backend, **(options or {})}
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
    from llm_collapse.data.bins import token_prefix

    longest = long_document(documents, tokenizer, max(config.long_lengths) - special)
    prefixes = {n: token_prefix(longest, n - special, tokenizer) for n in config.long_lengths}
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
