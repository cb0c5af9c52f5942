"""Which labels a passage alone carries for a model: the placed task's pilot (issue 63, step 1).

    python experiments/placed_labels.py [--model minilm] [--per-label 100]

The placed task (`llm_collapse.tasks.placed`) tests whether length hides a label the passage carries, so the
label must be readable from the passage with no filler at all. For each candidate (corpus, label, passage
tokens) this draws the passages the task would draw (`llm_collapse.data.placed.short_passages`: one paragraph
per document, balanced over the label, seed 0), embeds them alone and prints the out-of-fold logistic-regression
and leave-one-out kNN accuracy (the task's probes; chance 0.5 for two balanced labels). fp32, cache on.

On 2026-12-06 (Intel Xeon with AMX; minilm 1 min, gemma3-270m 5.5 min while a study run shared the CPU)::

    minilm sotu/major_party, passages of 32-112 tokens, 90 per label: logistic 0.494, kNN 0.483
    minilm sotu/era, passages of 32-112 tokens, 100 per label: logistic 0.835, kNN 0.770
    minilm movie_reviews/sentiment, passages of 32-484 tokens, 100 per label: logistic 0.665, kNN 0.550
    gemma3-270m sotu/major_party, passages of 32-112 tokens, 90 per label: logistic 0.572, kNN 0.517
    gemma3-270m sotu/era, passages of 32-112 tokens, 100 per label: logistic 0.830, kNN 0.800
    gemma3-270m movie_reviews/sentiment, passages of 32-484 tokens, 100 per label: logistic 0.695, kNN 0.625

So the study's placed runs use sotu's ``era``: a paragraph carries it for both models, party it does not.
"""

from __future__ import annotations

import argparse

import numpy as np

from llm_collapse.data import load_corpus
from llm_collapse.data.placed import PlacementError, short_passages
from llm_collapse.load import load_embedder
from llm_collapse.metrics.logistic import logistic_correct
from llm_collapse.metrics.probes import knn_correct
from llm_collapse.tasks.knn import K as KNN_NEIGHBOURS

CANDIDATES = (  # corpus, label, longest passage (the shortest length of a run minus its filler)
    ("sotu", "major_party", 112),
    ("sotu", "era", 112),
    ("movie_reviews", "sentiment", 484),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--per-label", type=int, default=100)
    args = parser.parse_args()
    embedder = load_embedder(args.model, dtype="fp32", max_length=512 if args.model == "minilm" else None)
    tokenizer = embedder.backend.tokenizer
    for corpus, label, longest in CANDIDATES:
        per_label = args.per_label
        while True:
            try:
                passages = short_passages(load_corpus(corpus), label, tokenizer, longest, per_label, seed=0)
                break
            except PlacementError:
                per_label -= 10  # movie reviews: few fit 484 minilm tokens
        vectors = embedder.encode([p.text for p in passages])
        labels = np.array([p.labels[label] for p in passages])
        logistic = logistic_correct(vectors, labels).mean()
        knn = knn_correct(vectors, labels, k=KNN_NEIGHBOURS).mean()
        print(f"{args.model} {corpus}/{label}, passages of 32-{longest} tokens, {per_label} per label: "
              f"logistic {logistic:.3f}, kNN {knn:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
