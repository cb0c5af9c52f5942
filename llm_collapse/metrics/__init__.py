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

The names below load their module on first use (module ``__getattr__``): `hidden` and `attention` import
torch, the rest only NumPy and SciPy, so a task module reads its metrics without loading model code.
Each module's docstring gives the exact definitions. Below a metric's minimum group size the value is
NaN (never 0) and a warning is logged.
"""

from __future__ import annotations

import importlib

_MODULE_OF: dict[str, str] = {
    "CentroidDecomposition": "decomposition",
    "DECOMPOSITION_KEYS": "decomposition",
    "METRIC_KEYS": "collapse",
    "MIN_GROUP_SIZE": "collapse",
    "TostResult": "proportions",
    "WhiteningParams": "posthoc",
    "all_but_the_top": "posthoc",
    "apply_whitening": "posthoc",
    "attention_entropy": "attention",
    "bootstrap_ci": "stats",
    "center_per_length": "posthoc",
    "centroid": "collapse",
    "centroid_cosine": "collapse",
    "centroid_decomposition": "decomposition",
    "centroid_distance": "collapse",
    "chance_longer_share": "hubness",
    "collapse_metrics": "collapse",
    "effective_rank": "collapse",
    "fit_whitening": "posthoc",
    "global_centroid_distance": "collapse",
    "high_frequency_energy_ratio": "hidden",
    "hubness_ci": "hubness",
    "k_occurrence": "hubness",
    "knn_correct": "probes",
    "knn_label_accuracy": "probes",
    "knn_neighbours": "probes",
    "layerwise_high_frequency": "hidden",
    "length_neighbour_summary": "hubness",
    "longer_neighbour_share": "hubness",
    "mean_pairwise_cosine": "collapse",
    "neighbour_lengths": "hubness",
    "newcombe_paired_interval": "proportions",
    "normalize_rows": "collapse",
    "pairwise_cosine_ci": "stats",
    "retrieval_scores": "probes",
    "spearman_trend": "stats",
    "split_halves": "posthoc",
    "tost_paired_mean": "proportions",
    "tost_paired_proportions": "proportions",
    "verdict": "proportions",
    "wilson_interval": "proportions",
}
"""Each re-exported name -> the submodule that defines it."""

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])
