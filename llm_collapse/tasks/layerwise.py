"""The low-pass view: per-layer high-frequency energy ratio and attention entropy by length bin, from the
same forward pass as the embeddings (`llm_collapse.tasks.layer_probe`), on ``layerwise_per_bin`` texts per bin
(in the prefix design the same documents at every length, one forward per document where sharing is exact).

The per-text statistics of each bin go to ``ctx.paired`` (per layer), so the runner writes paired
``<metric>_vs_base`` rows per layer (the same texts under every method) and, in the prefix design,
``<metric>_vs_shortest`` rows (document i at every length): the mean over texts of the difference, a paired
bootstrap interval and a paired t-test (the per-text values are continuous; `llm_collapse.tasks.base`).
``hf_ratio_length_free`` removes the ratio's pure length effect (`llm_collapse.metrics.hidden.length_free_hf_ratio`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from llm_collapse.errors import ConfigError
from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key
from llm_collapse.tasks.sample import CorpusSample
from llm_collapse.tasks.task import (
    MORE_COLLAPSE_IF_LOWER,
    MetricInfo,
    Options,
    Pass,
    RunView,
    Task,
    Workload,
    option,
)

RECORDER = 1.9
"""Seconds of `measure_layers` per second of a plain forward of the same text: 206.8 s vs 108.2 s for one
32768-token gemma3-270m text in fp32 on a 2-core Intel Xeon with AMX (the recorder's full-attention logits
grow as L^2, so shorter texts cost relatively less)."""


@dataclass(frozen=True)
class LayerwiseOptions(Options):
    title: ClassVar[str] = "the per-layer analysis"
    layerwise_per_bin: int = option(8, help="texts per bin for the per-layer analysis", always_hashed=True)

    def validate(self, run: RunView, task: str) -> LayerwiseOptions:
        if self.layerwise_per_bin < 1:
            raise ConfigError(f"--layerwise-per-bin must be >= 1, got {self.layerwise_per_bin}")
        return self

    def limited(self, n: int) -> LayerwiseOptions:
        return LayerwiseOptions(min(self.layerwise_per_bin, n))


def layerwise_workload(run: RunView, options: LayerwiseOptions, device: str) -> Workload:
    """Its texts of each length through the entropy recorder (with every layer's hidden states), at `RECORDER`."""
    texts = min(options.layerwise_per_bin, run.per_length)
    says = f"{texts} texts per length through the entropy recorder, ~{RECORDER:g}x a plain forward each"
    return Workload(passes=(Pass(says, texts, RECORDER, hidden_states=True),))


def run_layerwise(ctx: TaskContext, sample: CorpusSample, options: LayerwiseOptions) -> list[dict]:
    # torch and scipy.stats load where a cell runs, not where the task is declared (--help, llm-collapse list)
    from llm_collapse.metrics.hidden import length_free_hf_ratio
    from llm_collapse.metrics.stats import bootstrap_ci
    from llm_collapse.tasks.layer_probe import measure_layers

    groups = sample.by_length()
    picked = {length: groups[length][: options.layerwise_per_bin] for length in sorted(groups)}
    chosen = {length: [t.text for t in texts] for length, texts in picked.items()}
    # One call for every length: the prefix design's lengths of a document then share one forward.
    result = measure_layers(
        ctx.embedder, [text for texts in chosen.values() for text in texts], batch_size=ctx.batch_size
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
                point, low, high = bootstrap_ci(column, lambda x: float(np.nanmean(x)), seed=ctx.seed)
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


TASK = Task(
    name="layerwise",
    title="Layerwise statistics",
    run=run_layerwise,
    metrics={
        "hf_ratio": MetricInfo("high-frequency energy ratio", MORE_COLLAPSE_IF_LOWER, paired=True),
        "hf_ratio_length_free": MetricInfo(
            "high-frequency ratio x L/(L-1) (length-free)", MORE_COLLAPSE_IF_LOWER, paired=True
        ),
        "attention_entropy": MetricInfo("attention entropy (nats)", "", paired=True),
        "attention_entropy_normalized": MetricInfo("attention entropy / ln(#keys)", "", paired=True),
    },
    options=LayerwiseOptions,
    workload=layerwise_workload,
    figures=("layerwise",),
    sample=True,
    vectors_only=False,
)
