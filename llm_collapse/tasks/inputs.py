"""The inputs of a comparison, built once so every model and method sees the same texts.

Lengths are measured under one reference tokenizer (the first model's); each model's own token counts are
recorded next to its results (the ``tokens`` metric), because the same text is a different number of tokens
for a different tokenizer and, for echo, twice as many positions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from llm_collapse.config import CompareConfig
from llm_collapse.data import load_corpus, sample_length_binned
from llm_collapse.data.bins import BinnedText, target_bins
from llm_collapse.data.position import POSITIONS, position_task
from llm_collapse.data.synthetic import RetrievalTask, needle_task, passkey_task

logger = logging.getLogger(__name__)


@dataclass
class RunInputs:
    """Texts per length bin (collapse, knn, layerwise) and retrieval tasks per length (passkey, needle; position:
    early and late per length)."""

    tokenizer: str
    binned: list[BinnedText] = field(default_factory=list)
    retrieval: dict[str, list[RetrievalTask]] = field(default_factory=dict)

    def by_length(self) -> dict[int, list[BinnedText]]:
        groups: dict[int, list[BinnedText]] = {}
        for text in self.binned:
            groups.setdefault(text.target_tokens, []).append(text)
        return groups

    def n_texts(self) -> int:
        """Distinct texts a model embeds for this run (queries included)."""
        texts = {t.text for t in self.binned}
        for tasks in self.retrieval.values():
            for task in tasks:
                texts.update(task.documents)
                texts.update(task.queries)
        return len(texts)

    def describe(self) -> dict:
        return {
            "reference_tokenizer": self.tokenizer,
            "texts_per_length": {str(k): len(v) for k, v in sorted(self.by_length().items())},
            "retrieval": {
                name: {str(t.length): len(t.documents) for t in tasks}
                for name, tasks in self.retrieval.items()
            },
        }


def build_inputs(config: CompareConfig, tokenizer) -> RunInputs:
    """Samples the length-binned texts and generates the retrieval tasks under ``tokenizer``."""
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    inputs = RunInputs(tokenizer=name)
    if {"collapse", "knn", "layerwise"} & set(config.tasks):
        documents = load_corpus(config.corpus)
        inputs.binned = sample_length_binned(
            documents, tokenizer, target_bins(config.lengths), per_bin=config.max_per_bin, seed=config.seed
        )
    for task_name, make in (("passkey", passkey_task), ("needle", needle_task)):
        if task_name in config.tasks:
            inputs.retrieval[task_name] = [
                make(
                    length,
                    seed=config.seed,
                    n_docs=config.retrieval_docs,
                    n_queries=config.retrieval_queries,
                    tokenizer=tokenizer,
                    fit_to_tokens=True,
                )
                for length in config.lengths
            ]
    if "position" in config.tasks:
        inputs.retrieval["position"] = [
            position_task(
                length,
                position,
                seed=config.seed,
                n_docs=config.retrieval_docs,
                n_queries=config.retrieval_queries,
                tokenizer=tokenizer,
                fit_to_tokens=True,
            )
            for length in config.lengths
            for position in POSITIONS
        ]
    return inputs
