"""The collapse task: embedding geometry per length bin (definitions in `llm_collapse.metrics.collapse`).

Per bin: mean pairwise cosine (duplicate-aware bootstrap CI), distance to the bin centroid (jackknife CI:
bootstrap duplicates pull the centroid towards themselves and bias resamples low) and to the global
centroid of all bins of this model and method (bootstrap CI), cosine between bin and global
centroids, effective rank (delete-one jackknife CI, `llm_collapse.metrics.stats.effective_rank_ci`: a
bootstrap repeats rows, which add no rank; runs written before it have no effective-rank CI), the mean token count
under this model (``tokens``), and the squared distance to the global centroid split into within-length spread and
the length centroid's offset (`decomposition`). Each bin's embeddings are left in ``ctx.paired`` for the runner's paired
contrasts against ``base`` (`llm_collapse.tasks.base`).
"""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.collapse import (
    centroid,
    centroid_cosine,
    centroid_distance,
    global_centroid_distance,
)
from llm_collapse.metrics.decomposition import DECOMPOSITION_KEYS, centroid_decomposition
from llm_collapse.tasks.base import EMBEDDINGS, PairedItems, TaskContext, paired_key
from llm_collapse.tasks.sample import CorpusSample
from llm_collapse.tasks.task import MORE_COLLAPSE_IF_HIGHER, MORE_COLLAPSE_IF_LOWER, MetricInfo, Task

NAN_CI = (float("nan"), float("nan"))
GEOMETRY_MARGIN = 0.01
"""The equivalence margin of the geometry metrics (cosines and distances of unit vectors)."""


def run_collapse(ctx: TaskContext, sample: CorpusSample, options: None = None) -> list[dict]:
    # scipy.stats (~0.6 s) loads where a cell runs, not where the task is declared (--help, llm-collapse list)
    from llm_collapse.metrics.stats import bootstrap_ci, effective_rank_ci, jackknife_ci, pairwise_cosine_ci

    groups = sample.by_length()
    texts = [t.text for length in sorted(groups) for t in groups[length]]
    if not texts:
        return []
    vectors = ctx.encode(texts)
    lengths = np.array([len(e) for e in ctx.embedder.tokenize(texts)])
    global_c = centroid(vectors)
    rows, start = [], 0
    for length in sorted(groups):
        n = len(groups[length])
        X, tokens = vectors[start : start + n], lengths[start : start + n]
        start += n
        ids = tuple(t.item_id for t in groups[length])
        ctx.paired[paired_key("collapse", length)] = PairedItems(EMBEDDINGS, X, reference=global_c, ids=ids)
        label = f"{ctx.model}/{ctx.method}/{length}"
        seed = ctx.seed
        point, low, high = pairwise_cosine_ci(X, seed=seed, label=label)
        rows.append(
            ctx.row(
                task="collapse", length=length, metric="pairwise_cosine", value=point, ci=(low, high), n=n
            )
        )
        point, low, high = jackknife_ci(X, centroid_distance)
        rows.append(
            ctx.row(
                task="collapse", length=length, metric="centroid_distance", value=point, ci=(low, high), n=n
            )
        )
        point, low, high = bootstrap_ci(X, lambda x: global_centroid_distance(x, global_c), seed=seed)
        rows.append(
            ctx.row(
                task="collapse",
                length=length,
                metric="global_centroid_distance",
                value=point,
                ci=(low, high),
                n=n,
            )
        )
        rows.append(
            ctx.row(
                task="collapse",
                length=length,
                metric="centroid_cosine",
                value=centroid_cosine(centroid(X), global_c, label=label),
                n=n,
            )
        )
        point, low, high = effective_rank_ci(X, label=label)
        rows.append(
            ctx.row(task="collapse", length=length, metric="effective_rank", value=point, ci=(low, high), n=n)
        )
        rows.append(ctx.row(task="collapse", length=length, metric="tokens", value=float(tokens.mean()), n=n))
        rows += [
            ctx.row(task="collapse", length=length, n=n, **part) for part in decomposition(X, global_c, seed)
        ]
    return rows


def decomposition(X: np.ndarray, global_c: np.ndarray, seed: int) -> list[dict]:
    """The squared distance to the global centroid and its two parts, with intervals
    (`llm_collapse.metrics.decomposition`): a bootstrap of the per-item squared distances for the whole,
    delete-one jackknifes for the spread and the offset (both move with the length's own centroid, which a
    bootstrap's repeated rows pull towards themselves)."""
    from llm_collapse.metrics.stats import bootstrap_ci, jackknife_ci

    whole = centroid_decomposition(X, global_c)
    point, low, high = bootstrap_ci(whole.global_sq, lambda s: s.mean(axis=-1), seed=seed, batched=True)
    parts = [dict(metric=DECOMPOSITION_KEYS[0], value=point, ci=(low, high))]
    for key in DECOMPOSITION_KEYS[1:]:
        point, low, high = jackknife_ci(
            X, lambda x, key=key: centroid_decomposition(x, global_c).summary()[key]
        )
        parts.append(dict(metric=key, value=point, ci=(low, high)))
    return parts


TASK = Task(
    name="collapse",
    title="Collapse geometry",
    run=run_collapse,
    metrics={
        "pairwise_cosine": MetricInfo(
            "mean pairwise cosine",
            MORE_COLLAPSE_IF_HIGHER,
            paired=True,
            set_level=True,
            margin=GEOMETRY_MARGIN,
        ),
        "centroid_cosine": MetricInfo(
            "cosine to global centroid", MORE_COLLAPSE_IF_HIGHER, margin=GEOMETRY_MARGIN
        ),
        "centroid_distance": MetricInfo(
            "distance to bin centroid (ours)",
            MORE_COLLAPSE_IF_LOWER,
            paired=True,
            set_level=True,
            margin=GEOMETRY_MARGIN,
        ),
        "global_centroid_distance": MetricInfo(
            "distance to global centroid (paper)", MORE_COLLAPSE_IF_LOWER, paired=True, margin=GEOMETRY_MARGIN
        ),
        # The squared paper distance = within-length spread + the length centroid's offset (metrics.decomposition):
        # the spread is collapse proper; the offset moves with where a length's group sits, not how tight it is.
        "global_centroid_sq_distance": MetricInfo(
            "squared distance to global centroid", MORE_COLLAPSE_IF_LOWER, paired=True, digits=4
        ),
        "within_length_sq_spread": MetricInfo(
            "within-length spread (squared)", MORE_COLLAPSE_IF_LOWER, paired=True, set_level=True, digits=4
        ),
        "length_centroid_offset_sq": MetricInfo(
            "length centroid offset (squared)", "", paired=True, set_level=True, digits=4
        ),
        "effective_rank": MetricInfo("effective rank", MORE_COLLAPSE_IF_LOWER),
        "tokens": MetricInfo("mean tokens per text", ""),
    },
    headline=(
        "pairwise_cosine",
        "global_centroid_distance",  # the TempScale paper's collapse distance
        "centroid_distance",
    ),
    sample=True,
)
