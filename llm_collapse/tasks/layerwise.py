"""The low-pass view: per-layer high-frequency energy ratio and attention entropy by length bin, from the
same forward pass as the embeddings (`llm_collapse.tasks.layer_probe`), on ``layerwise_per_bin`` texts per bin
(in the prefix design the same documents at every length, one forward per document where sharing is exact).

The per-text statistics of each bin go to ``ctx.paired`` (per layer), so the runner writes paired
``<metric>_vs_base`` rows per layer (the same texts under every method) and, in the prefix design,
``<metric>_vs_shortest`` rows (document i at every length): the mean over texts of the difference, a paired
bootstrap interval and a paired t-test (the per-text values are continuous; `llm_collapse.tasks.base`).
``hf_ratio_length_free`` removes the ratio's pure length effect (`llm_collapse.metrics.hidden.length_free_hf_ratio`)."""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.hidden import length_free_hf_ratio
from llm_collapse.metrics.stats import bootstrap_ci
from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key
from llm_collapse.tasks.layer_probe import measure_layers


def run_layerwise(ctx: TaskContext) -> list[dict]:
    groups = ctx.inputs.by_length()
    picked = {length: groups[length][: ctx.config.layerwise_per_bin] for length in sorted(groups)}
    chosen = {length: [t.text for t in texts] for length, texts in picked.items()}
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
            ctx.paired[paired_key("layerwise", length, metric=metric)] = PairedItems(
                metric, values, per_layer=True, ids=tuple(t.item_id for t in picked[length])
            )
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
    return rows
