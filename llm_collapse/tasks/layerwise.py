"""The low-pass view: per-layer high-frequency energy ratio and attention entropy by length bin, from the
same forward pass as the embeddings (`llm_collapse.metrics.layerwise`), on ``layerwise_per_bin`` texts per bin
(in the prefix design the same documents at every length, one forward per document where sharing is exact).

In the prefix design every statistic also gets ``<metric>_vs_shortest`` rows per layer: the mean over documents of
(value at L - value at the shortest length), a paired bootstrap interval and a paired t-test (the per-document
values are continuous).
``hf_ratio_length_free`` removes the ratio's pure length effect (`llm_collapse.metrics.hidden.length_free_hf_ratio`)."""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.hidden import length_free_hf_ratio
from llm_collapse.metrics.layerwise import measure_layers
from llm_collapse.metrics.stats import bootstrap_ci
from llm_collapse.tasks.base import TaskContext, paired_t_contrast
from llm_collapse.tasks.registry import VS_SHORTEST


def run_layerwise(ctx: TaskContext) -> list[dict]:
    groups = ctx.inputs.by_length()
    chosen = {
        length: [t.text for t in groups[length][: ctx.config.layerwise_per_bin]] for length in sorted(groups)
    }
    # One call for every length: the prefix design's lengths of a document then share one forward.
    result = measure_layers(
        ctx.embedder, [text for texts in chosen.values() for text in texts], batch_size=ctx.config.batch_size
    )
    statistics = {
        "hf_ratio": result.high_frequency,
        "hf_ratio_length_free": length_free_hf_ratio(result.high_frequency, result.lengths[:, None]),
        "attention_entropy": result.attention_entropy,
        "attention_entropy_normalized": result.attention_entropy_normalized,
    }
    parts, start = {}, 0
    for length, texts in chosen.items():
        parts[length] = slice(start, start + len(texts))
        start += len(texts)
    rows = []
    for length, part in parts.items():
        texts = chosen[length]
        for metric, everything in statistics.items():
            values = everything[part]
            for layer in range(values.shape[1]):
                column = values[:, layer]
                point, low, high = bootstrap_ci(column, lambda x: float(np.nanmean(x)), seed=ctx.config.seed)
                rows.append(
                    ctx.row(
                        task="layerwise",
                        length=length,
                        layer=layer,
                        metric=metric,
                        value=point,
                        ci=(low, high),
                        n=len(texts),
                    )
                )
    if ctx.inputs.design == "prefix":
        rows += _length_contrasts(ctx, statistics, parts)
    return rows


def _length_contrasts(
    ctx: TaskContext, statistics: dict[str, np.ndarray], parts: dict[int, slice]
) -> list[dict]:
    """``<metric>_vs_shortest`` per layer: row i of every length is document i (the prefix design)."""
    shortest = min(parts)
    rows = []
    for length, part in parts.items():
        reference = parts[shortest]
        if length == shortest or part.stop - part.start != reference.stop - reference.start:
            continue
        for metric, values in statistics.items():
            for layer in range(values.shape[1]):
                a, b = values[part, layer], values[reference, layer]
                keep = ~(np.isnan(a) | np.isnan(b))
                a, b = a[keep], b[keep]
                point, low, high, p_value = paired_t_contrast(a, b, ctx.config.seed)
                rows.append(
                    ctx.row(
                        task="layerwise",
                        length=length,
                        layer=layer,
                        metric=metric + VS_SHORTEST,
                        value=point,
                        ci=(low, high),
                        n=int(keep.sum()),
                        p_value=p_value,
                    )
                )
    return rows
