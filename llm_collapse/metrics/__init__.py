"""Length-collapse metrics: arrays in, numbers out, with no model or corpus knowledge.

- `collapse`: geometry of one group (length bin) of embeddings: pairwise cosine, centroid distances,
  centroid cosine, effective rank.
- `decomposition`: squared distance to the global centroid = within-length spread + length offset.
- `posthoc`: post-hoc baselines on the embeddings (centring per length, all-but-the-top, whitening fitted on
  a held-out half, the seeded split by item id).
- `probes`: leave-one-out kNN label accuracy and its neighbour lists; retrieval acc@k / nDCG@k / MRR.
- `hubness`: the kNN mechanism per length: share of neighbours that are longer (against chance),
  k-occurrence and hubness (skewness, top hub's share) with bootstrap intervals. Its ``hubness``
  function is not re-exported here: the name would shadow the submodule.
- `hidden`: high-frequency energy ratio of token states (torch inputs).
- `attention`: which keys a query may attend to (causal, sliding window, padding) and attention entropy.
- `stats`: percentile bootstrap intervals (generic, and duplicate-aware for pairwise cosine) and the
  Spearman trend across bins.
- `proportions`: Wilson and Newcombe (paired) intervals, TOST equivalence tests with declared margins, and
  the "different" / "equivalent within ±m" / "inconclusive" reading of a paired contrast.

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
from llm_collapse.metrics.decomposition import (
    DECOMPOSITION_KEYS,
    CentroidDecomposition,
    centroid_decomposition,
)
from llm_collapse.metrics.hidden import high_frequency_energy_ratio, layerwise_high_frequency
from llm_collapse.metrics.hubness import (
    chance_longer_share,
    hubness_ci,
    k_occurrence,
    length_neighbour_summary,
    longer_neighbour_share,
    neighbour_lengths,
)
from llm_collapse.metrics.posthoc import (
    WhiteningParams,
    all_but_the_top,
    apply_whitening,
    center_per_length,
    fit_whitening,
    split_halves,
)
from llm_collapse.metrics.probes import knn_correct, knn_label_accuracy, knn_neighbours, retrieval_scores
from llm_collapse.metrics.proportions import (
    DEFAULT_MARGINS,
    TostResult,
    margin_for,
    newcombe_paired_interval,
    tost_paired_mean,
    tost_paired_proportions,
    verdict,
    wilson_interval,
)
from llm_collapse.metrics.stats import bootstrap_ci, pairwise_cosine_ci, spearman_trend

__all__ = [
    "DECOMPOSITION_KEYS",
    "DEFAULT_MARGINS",
    "METRIC_KEYS",
    "MIN_GROUP_SIZE",
    "CentroidDecomposition",
    "WhiteningParams",
    "all_but_the_top",
    "apply_whitening",
    "TostResult",
    "attention_entropy",
    "bootstrap_ci",
    "center_per_length",
    "centroid",
    "chance_longer_share",
    "centroid_cosine",
    "centroid_distance",
    "centroid_decomposition",
    "collapse_metrics",
    "effective_rank",
    "fit_whitening",
    "global_centroid_distance",
    "high_frequency_energy_ratio",
    "hubness_ci",
    "k_occurrence",
    "knn_correct",
    "knn_label_accuracy",
    "knn_neighbours",
    "layerwise_high_frequency",
    "length_neighbour_summary",
    "longer_neighbour_share",
    "margin_for",
    "mean_pairwise_cosine",
    "neighbour_lengths",
    "newcombe_paired_interval",
    "normalize_rows",
    "pairwise_cosine_ci",
    "retrieval_scores",
    "split_halves",
    "spearman_trend",
    "tost_paired_mean",
    "tost_paired_proportions",
    "verdict",
    "wilson_interval",
]
