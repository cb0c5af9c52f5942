"""`TaskSettings`: the run settings a task reads, apart from the heavy task modules (the config builds it)."""

from __future__ import annotations

from dataclasses import dataclass

PLACED_DEPTHS: tuple[float, ...] = (0.5,)
"""The placed task's default depth: the passage in the middle of its filler."""
PLACED_PROBES: tuple[str, ...] = ("logistic", "knn")
"""The placed task's probes (``knn``: both kNN probes, within a length and over a pool of all lengths)."""


@dataclass(frozen=True)
class TaskSettings:
    """What tasks read of a run's configuration (`llm_collapse.run.config.CompareConfig.task_settings` gives it),
    so that tasks know no run: a test builds one by hand.

    Attributes:
        corpus: Corpus name, recorded in every row.
        seed: Sampling and bootstrap seed.
        batch_size: Most texts per forward pass (halved on out-of-memory, per cell).
        tasks: Every task of the run (the quantization task leaves collapse rows to ``collapse`` when it runs).
        knn_label: The label key of the kNN probe, resolved for the corpus.
        retrieval_pool: Candidates per retrieval query (None: every document of the length).
        layerwise_per_bin: Texts per bin of the per-layer analysis.
        quants: The quantized variants the quantization task compares with the cell's model.
        placed_probes: The placed task's probes (``logistic``, ``knn``).
    """

    corpus: str
    seed: int = 0
    batch_size: int = 16
    tasks: tuple[str, ...] = ()
    knn_label: str | None = None
    retrieval_pool: int | None = None
    layerwise_per_bin: int = 8
    quants: tuple[str, ...] = ()
    placed_probes: tuple[str, ...] = PLACED_PROBES
