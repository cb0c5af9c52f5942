"""The low-pass view: per-layer high-frequency energy ratio and attention entropy by length bin, from the
same forward pass as the embeddings (`llm_collapse.metrics.layerwise`), on ``layerwise_per_bin`` texts per bin
(in the prefix design the same documents at every length, one forward per document where sharing is exact).
``hf_ratio_length_free`` removes the ratio's pure length effect (`llm_collapse.metrics.hidden.length_free_hf_ratio`)."""

from __future__ import annotations

import numpy as np

from llm_collapse.metrics.hidden import length_free_hf_ratio
from llm_collapse.metrics.layerwise import measure_layers
from llm_collapse.metrics.stats import bootstrap_ci
from llm_collapse.tasks.base import TaskContext


def run_layerwise(ctx: TaskContext) -> list[dict]:
    groups = ctx.inputs.by_length()
    chosen = {
        length: [t.text for t in groups[length][: ctx.config.layerwise_per_bin]] for length in sorted(groups)
    }
    # One call for every length: the prefix design's lengths of a document then share one forward.
    result = measure_layers(
        ctx.embedder, [text for texts in chosen.values() for text in texts], batch_size=ctx.config.batch_size
    )
    rows, start = [], 0
    for length, texts in chosen.items():
        part = slice(start, start + len(texts))
        start = part.stop
        for metric, values in (
            ("hf_ratio", result.high_frequency[part]),
            (
                "hf_ratio_length_free",
                length_free_hf_ratio(result.high_frequency[part], result.lengths[part, None]),
            ),
            ("attention_entropy", result.attention_entropy[part]),
            ("attention_entropy_normalized", result.attention_entropy_normalized[part]),
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
