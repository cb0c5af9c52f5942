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
from llm_collapse.metrics.stats import bootstrap_ci, effective_rank_ci, jackknife_ci, pairwise_cosine_ci
from llm_collapse.tasks.base import EMBEDDINGS, PairedItems, TaskContext, paired_key

NAN_CI = (float("nan"), float("nan"))


def run_collapse(ctx: TaskContext) -> list[dict]:
    groups = ctx.inputs.by_length()
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
        seed = ctx.config.seed
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
    whole = centroid_decomposition(X, global_c)
    point, low, high = bootstrap_ci(whole.global_sq, lambda s: s.mean(axis=-1), seed=seed, batched=True)
    parts = [dict(metric=DECOMPOSITION_KEYS[0], value=point, ci=(low, high))]
    for key in DECOMPOSITION_KEYS[1:]:
        point, low, high = jackknife_ci(
            X, lambda x, key=key: centroid_decomposition(x, global_c).summary()[key]
        )
        parts.append(dict(metric=key, value=point, ci=(low, high)))
    return parts
