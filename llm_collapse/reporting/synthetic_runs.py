"""Small, valid run directories for tests and demos (`write_synthetic_run`): seeded random numbers that mean
nothing, in the results schema and ``run.json`` layout that `llm_collapse.reporting` reads."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llm_collapse.interventions import Method, parse_method
from llm_collapse.interventions.tempscale import plain_tau
from llm_collapse.records.record import RUN_FILE
from llm_collapse.reporting.frames import (
    RESULT_COLUMNS,
    RESULTS_CSV,
    RESULTS_FILE,
    sort_results,
    sorted_methods,
)

SYNTHETIC_MODELS: tuple[str, ...] = ("synth-decoder", "synth-encoder")
SYNTHETIC_METHODS: tuple[str, ...] = ("base", "tempscale:0.8", "tempscale:0.9")
"""As ``--methods`` writes them: the rows carry their slugs, run.json the texts."""
SYNTHETIC_LENGTHS: tuple[int, ...] = (256, 512, 1024, 2048)
SYNTHETIC_DEPTHS: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
SYNTHETIC_LAYERS: int = 6
SYNTHETIC_TASKS: tuple[str, ...] = ("collapse", "knn", "passkey", "layerwise")


def _row(model, method, task, corpus, length, metric, value, n, *, depth=math.nan, layer=math.nan, ci=None):
    low, high = ci if ci is not None else (math.nan, math.nan)
    return {
        "model": model,
        "method": method,
        "task": task,
        "corpus": corpus,
        "length": int(length),
        "depth": float(depth),
        "layer": float(layer),
        "metric": metric,
        "value": float(value),
        "ci_low": float(low),
        "ci_high": float(high),
        "n": int(n),
    }


def _tau(method: Method) -> float:
    tau = plain_tau(method.stack.parts)
    return 1.0 if tau is None else tau


def synthetic_results(
    *,
    seed: int = 0,
    models: Sequence[str] = SYNTHETIC_MODELS,
    methods: Sequence[str] = SYNTHETIC_METHODS,
    lengths: Sequence[int] = SYNTHETIC_LENGTHS,
    corpus: str = "synthetic",
    tasks: Sequence[str] = SYNTHETIC_TASKS,
) -> pd.DataFrame:
    """Random but plausible tidy results (collapse grows with length, less so for tau < 1).

    Args:
        seed: numpy seed; the same arguments always give the same frame.
        models: Model names.
        methods: Methods as ``--methods`` writes them (a temperature shapes the numbers, others are noise);
            the rows carry their slugs.
        lengths: Length bins.
        corpus: Corpus name.
        tasks: Subset of `SYNTHETIC_TASKS` to keep.

    Returns:
        A frame with `RESULT_COLUMNS` covering ``tasks`` (passkey: overall and per-depth rows).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for mi, model in enumerate(models):
        for method in map(parse_method, methods):
            relief = 1.0 - _tau(method)  # tau < 1 sharpens attention: less collapse
            for li, length in enumerate(lengths):
                rows += _synthetic_bin(rng, model, method.slug, corpus, li, length, 0.1 * mi, relief)
    frame = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    return sort_results(frame[frame["task"].isin(tasks)])


def _synthetic_bin(rng, model, method, corpus, li, length, offset, relief):  # noqa: PLR0913
    """Rows of one (model, method, length) cell."""
    n = 64
    grow = 0.12 * li * (1.0 - 2.0 * relief)
    noise = lambda s=0.01: float(rng.normal(0, s))  # noqa: E731
    cos = min(0.3 + offset + grow + noise(), 0.99)
    dist = max(0.8 - 0.9 * (cos - 0.3), 0.05)
    acc = float(np.clip(0.95 - 0.15 * li * (1 - 3 * relief) + noise(0.02), 0.05, 0.95))
    rows = [
        _row(
            model, method, "collapse", corpus, length, "pairwise_cosine", cos, n, ci=(cos - 0.02, cos + 0.02)
        ),
        _row(
            model,
            method,
            "collapse",
            corpus,
            length,
            "centroid_distance",
            dist,
            n,
            ci=(dist - 0.03, dist + 0.03),
        ),
        _row(model, method, "collapse", corpus, length, "global_centroid_distance", dist + 0.05, n),
        _row(model, method, "collapse", corpus, length, "centroid_cosine", min(cos + 0.2, 1.0), n),
        _row(model, method, "collapse", corpus, length, "effective_rank", 40 * dist + noise(), n),
        _row(model, method, "knn", corpus, length, "knn_accuracy", acc, n, ci=(acc - 0.05, acc + 0.05)),
    ]
    depth_accs = [
        float(np.clip(acc - 0.2 * (1 - abs(d - 0.5) * 2) * li / 3 + noise(0.03), 0, 1))
        for d in SYNTHETIC_DEPTHS
    ]
    rows.append(_row(model, method, "passkey", corpus, length, "acc@1", float(np.mean(depth_accs)), n))
    for depth, value in zip(SYNTHETIC_DEPTHS, depth_accs, strict=True):
        rows.append(_row(model, method, "passkey", corpus, length, "acc@1", value, n // 5, depth=depth))
    for layer in range(SYNTHETIC_LAYERS + 1):
        hf = 0.5 * math.exp(-layer / 3) * (1 - 0.1 * li) + abs(noise(0.005))
        rows.append(_row(model, method, "layerwise", corpus, length, "hf_ratio", hf, n, layer=layer))
        if layer > 0:
            ent = math.log(length) * (0.5 + 0.05 * layer) + noise(0.02)
            rows.append(
                _row(model, method, "layerwise", corpus, length, "attention_entropy", ent, n, layer=layer)
            )
            rows.append(
                _row(
                    model,
                    method,
                    "layerwise",
                    corpus,
                    length,
                    "attention_entropy_normalized",
                    ent / math.log(length),
                    n,
                    layer=layer,
                )
            )
    return rows


def synthetic_meta(
    results: pd.DataFrame,
    *,
    tiny_random: bool | Iterable[str] = False,
    hardware: dict[str, Any] | None = None,
    seed: int = 0,
    methods: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A ``run.json`` dict matching ``results``.

    The first model gets a 512-token sliding window and the last a ``max_length`` of 1024 with truncated
    texts in the longest bin, so the report's caveats have something to say.

    Args:
        results: Frame from `synthetic_results`.
        tiny_random: True to mark every model, or the names of the models to mark.
        hardware: The ``hardware`` entry (default: a fixed CPU description).
        seed: Recorded as ``config.seed``.
        methods: The methods as written (``config.methods``); None: the rows' slugs.

    Returns:
        The run metadata.
    """
    models = sorted(results["model"].unique())
    slugs = sorted_methods(results["method"].unique())
    tiny = set(models) if tiny_random is True else set(tiny_random or ())
    longest = int(results["length"].max())
    entries = {}
    for i, model in enumerate(models):
        window = 512 if i == 0 else None
        max_length = 1024 if i == len(models) - 1 and len(models) > 1 else 32768
        truncated = {m: (8 if longest > max_length else 0) for m in slugs}
        describe = {
            "dtype": "float32",
            "attn_implementation": "sdpa",
            "sliding_window": window,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "max_length": max_length,
            "weights": {"source": f"synthetic/{model}"},
        }
        entries[model] = {
            "describe": describe,
            "tiny_random": model in tiny,
            "truncated": truncated,
            "n_texts": 256,
        }
    return {
        "config": {
            "seed": seed,
            "models": models,
            "methods": list(methods) if methods is not None else slugs,
            "tasks": sorted(results["task"].unique()),
            "corpus": sorted(results["corpus"].unique()),
            "lengths": sorted(int(x) for x in results["length"].unique()),
        },
        "versions": {"llm_collapse": "0.1.0", "python": "3.12"},
        "git_commit": "0000000synthetic",
        "hardware": hardware
        if hardware is not None
        else {"device": "cpu", "cpu": "synthetic CPU", "n_cpus": 2},
        "started": "2025-01-01T00:00:00+00:00",
        "wall_time_s": {"embed": 12.5, "metrics": 3.25},
        "models": entries,
        "notes": ["synthetic results for tests: the numbers mean nothing"],
    }


def write_synthetic_run(
    run_dir: Path | str,
    *,
    tiny_random: bool | Iterable[str] = False,
    hardware: dict[str, Any] | None = None,
    **grid: Any,
) -> Path:
    """Write a valid synthetic run directory (``results.parquet``, ``results.csv``, ``run.json``).

    Args:
        run_dir: Directory to create (parents too); existing files are overwritten.
        tiny_random: Mark all (True) or the named models ``tiny_random``.
        hardware: ``hardware`` entry of ``run.json``.
        **grid: `synthetic_results`'s arguments (``seed``, ``models``, ``methods``, ``lengths``, ``corpus``,
            ``tasks``), documented there once.

    Returns:
        ``run_dir`` as a Path.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    results = synthetic_results(**grid)
    results.to_parquet(run_dir / RESULTS_FILE, index=False)
    results.to_csv(run_dir / RESULTS_CSV, index=False)
    methods = grid.get("methods", SYNTHETIC_METHODS)
    meta = synthetic_meta(
        results, tiny_random=tiny_random, hardware=hardware, seed=grid.get("seed", 0), methods=methods
    )
    (run_dir / RUN_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return run_dir
