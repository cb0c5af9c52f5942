"""The low-pass view: per-layer high-frequency energy ratio and attention entropy by length bin, from the
same forward pass as the embeddings (`llm_collapse.metrics.layerwise`), on ``layerwise_per_bin`` texts per bin.
``hf_ratio_length_free`` removes the ratio's pure length effect (`llm_collapse.metrics.hidden.length_free_hf_ratio`)."""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.hidden import length_free_hf_ratio
from llm_collapse.metrics.layerwise import measure_layers
from llm_collapse.metrics.stats import bootstrap_ci
from llm_collapse.tasks.base import TaskContext


def run_layerwise(ctx: TaskContext) -> list[dict]:
    groups = ctx.inputs.by_length()
    rows = []
    for length in sorted(groups):
        texts = [t.text for t in groups[length][: ctx.config.layerwise_per_bin]]
        result = measure_layers(ctx.embedder, texts, batch_size=ctx.config.batch_size)
        for metric, values in (
            ("hf_ratio", result.high_frequency),
            ("hf_ratio_length_free", length_free_hf_ratio(result.high_frequency, result.lengths[:, None])),
            ("attention_entropy", result.attention_entropy),
            ("attention_entropy_normalized", result.attention_entropy_normalized),
        ):
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
