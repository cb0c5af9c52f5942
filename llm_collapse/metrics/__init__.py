"""Length-collapse metrics: arrays in, numbers out, with no model or corpus knowledge.

- `collapse`: geometry of one group (length bin) of embeddings: pairwise cosine, centroid distances,
  centroid cosine, effective rank.
- `probes`: leave-one-out kNN label accuracy; retrieval acc@k / nDCG@k / MRR.
- `hidden`: high-frequency energy ratio of token states (torch inputs).
- `attention`: which keys a query may attend to (causal, sliding window, padding) and attention entropy.
- `stats`: percentile bootstrap intervals (generic, and duplicate-aware for pairwise cosine) and the
  Spearman trend across bins.

Each module's docstring gives the exact definitions. Below a metric's minimum group size the value is
NaN (never 0) and a warning is logged.
"""

from __future__ import annotations

from llm_collapse.metrics.attention import attention_entropy
from llm_collapse.metrics.collapse import (
    METRIC_KEYS,
    MIN_GROUP_SIZE,
    centroid,
    centroid_cosine,
    centroid_distance,
    collapse_metrics,
    effective_rank,
    global_centroid_distance,
    mean_pairwise_cosine,
    normalize_rows,
)
from llm_collapse.metrics.hidden import high_frequency_energy_ratio, layerwise_high_frequency
from llm_collapse.metrics.probes import knn_correct, knn_label_accuracy, retrieval_scores
from llm_collapse.metrics.stats import bootstrap_ci, pairwise_cosine_ci, spearman_trend

__all__ = [
    "METRIC_KEYS",
    "MIN_GROUP_SIZE",
    "attention_entropy",
    "bootstrap_ci",
    "centroid",
    "centroid_cosine",
    "centroid_distance",
    "collapse_metrics",
    "effective_rank",
    "global_centroid_distance",
    "high_frequency_energy_ratio",
    "knn_correct",
    "knn_label_accuracy",
    "layerwise_high_frequency",
    "mean_pairwise_cosine",
    "normalize_rows",
    "pairwise_cosine_ci",
    "retrieval_scores",
    "spearman_trend",
]
