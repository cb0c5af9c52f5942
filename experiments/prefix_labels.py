"""How mixed the labels of the study's long prefix texts are (the kNN probe's label noise by length).

    python experiments/prefix_labels.py [--config experiments/study/tau32k_below1.yaml] [--label party]

A prefix-design text that is longer than its start address runs into the following addresses
(`llm_collapse.data.prefixes`), and keeps the start address's labels. For each length this prints how many
texts reach an address whose label differs from the start's, and the mean share of the text's characters
that come from addresses with the start's label (1.0: every character does). Where the run is committed
with items.parquet and a kNN task on that label, it also prints base's cross-length kNN change from the shortest
to the longest length over all texts and over those that stay within one label (the same neighbours; only the
queries are restricted). Reads the corpus, the first model's tokenizer and the run's items: no model is run.

On 2026-12-05 (`tau32k_below1`'s 32 texts, label ``party``; `tau8k`'s 64 texts to 8k: 2 and 4 of 64 at 4k and
8k, 0.993 and 0.971)::

    experiments/study/tau32k_below1.yaml: label 'party', 32 texts
          64:  0 of 32 texts reach another party; start label's share of characters 1.000 (min 1.000)
         128:  0 of 32 texts reach another party; start label's share of characters 1.000 (min 1.000)
         256:  0 of 32 texts reach another party; start label's share of characters 1.000 (min 1.000)
         512:  0 of 32 texts reach another party; start label's share of characters 1.000 (min 1.000)
        1024:  1 of 32 texts reach another party; start label's share of characters 0.988 (min 0.629)
        2048:  1 of 32 texts reach another party; start label's share of characters 0.978 (min 0.306)
        4096:  2 of 32 texts reach another party; start label's share of characters 0.962 (min 0.153)
        8192:  6 of 32 texts reach another party; start label's share of characters 0.934 (min 0.077)
       16384:  9 of 32 texts reach another party; start label's share of characters 0.863 (min 0.038)
       32768: 14 of 32 texts reach another party; start label's share of characters 0.771 (min 0.019)
      knn_cross_accuracy of tau32k_below1's base, all texts (n=32): 0.469 at 64 -> 0.562 at 32768, exact McNemar p=0.549
      knn_cross_accuracy of tau32k_below1's base, texts within one label (n=18): 0.500 at 64 -> 0.667 at 32768, exact McNemar p=0.453
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pandas as pd

from llm_collapse.adapters import resolve_spec
from llm_collapse.backends.hf import load_tokenizer
from llm_collapse.backends.weights import resolve_weights
from llm_collapse.data import load_corpus
from llm_collapse.data.corpora import paragraphs
from llm_collapse.metrics.stats import mcnemar_exact_p
from llm_collapse.records.results import ITEMS_FILE
from llm_collapse.run.config import CompareConfig
from llm_collapse.tasks.base import BASE_METHOD
from llm_collapse.tasks.inputs import build_inputs


def boundaries(longest: str, start: int, joined: int, documents: list) -> list[tuple[int, int]]:
    """(character offset in ``longest``, corpus index) where each joined document begins, start included."""
    out = [(0, start)]
    for j in range(start + 1, start + joined + 1):
        first = next((p for p in paragraphs(documents[j].text) or [documents[j].text] if p.strip()), None)
        at = longest.find(first, out[-1][0]) if first else -1
        if at >= 0:  # a document absent from the longest prefix begins after it: never reached
            out.append((at, j))
    return out


def label_mix(
    text: str, cuts: list[tuple[int, int]], documents: list, label: str, start_label: str
) -> tuple[bool, float]:
    """Whether ``text`` (a prefix of the long text that ``cuts`` splits) reaches a document of another label,
    and the share of its characters from documents with ``start_label``."""
    ends = [offset for offset, _ in cuts[1:]] + [len(text)]
    same, other = 0, False
    for (offset, j), end in zip(cuts, ends, strict=True):
        if offset >= len(text):
            break
        if documents[j].labels.get(label) == start_label:
            same += min(end, len(text)) - offset
        else:
            other = True
    return other, same / len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/study/tau32k_below1.yaml")
    parser.add_argument("--label", default=None, help="label to check (default: the config's)")
    args = parser.parse_args()
    config = CompareConfig.from_sources({}, args.config)
    knn = config.tasks.get("knn")
    given = knn.label if knn is not None else None
    label = args.label or given
    spec, implied = resolve_spec(config.models[0])
    weights = resolve_weights(
        spec.name, spec.hub_id, spec.source, implied, convert=False, revision=spec.revision
    )
    tokenizer = load_tokenizer(weights.directory, gguf_file=weights.gguf_file)
    documents = load_corpus(config.corpus)
    index = {d.doc_id: i for i, d in enumerate(documents)}
    items = build_inputs(config, tokenizer, documents).sample.texts
    longest = {t.doc_id: t.text for t in items if t.target_tokens == max(config.lengths)}
    print(f"{args.config}: label {label!r}, {len(longest)} texts")
    cuts = {}  # doc_id "<start doc>@<paragraph>[+k]" (llm_collapse.data.prefixes): the same at every length
    for doc_id, text in longest.items():
        start_id, _, rest = doc_id.partition("@")
        cuts[doc_id] = boundaries(text, index[start_id], int(rest.partition("+")[2] or 0), documents)
    pure: set[str] = set()  # texts whose longest prefix stays within the start's label
    for length in config.lengths:
        mixed, shares = 0, []
        for t in (t for t in items if t.target_tokens == length):
            other, share = label_mix(t.text, cuts[t.doc_id], documents, label, t.labels.get(label))
            mixed += other
            shares.append(share)
            if length == max(config.lengths) and not other:
                pure.add(t.doc_id)
        print(
            f"  {length:>6}: {mixed:>2} of {len(shares)} texts reach another {label}; "
            f"start label's share of characters {sum(shares) / len(shares):.3f} (min {min(shares):.3f})"
        )
    items_path = Path(config.out) / ITEMS_FILE
    if knn is not None and label == given and items_path.is_file():
        knn_by_purity(items_path, pure, min(config.lengths), max(config.lengths))


def knn_by_purity(path: Path, pure: set[str], shortest: int, longest: int) -> None:
    """The run's cross-length kNN change from the shortest to the longest length (base), over all its texts
    and over the texts that stay within one label (the same neighbours: only the queries are restricted)."""
    items = pd.read_parquet(path)
    knn = items[(items["task"] == "knn") & (items["method"] == BASE_METHOD)]
    wide = knn.pivot_table(index="item", columns="length", values="knn_cross_accuracy")
    for name, rows in (("all texts", wide), ("texts within one label", wide[wide.index.isin(pure)])):
        a, b = rows[shortest].to_numpy(), rows[longest].to_numpy()
        print(
            f"  knn_cross_accuracy of {path.parent.name}'s base, {name} (n={len(rows)}): {a.mean():.3f} at "
            f"{shortest} -> {b.mean():.3f} at {longest}, exact McNemar p={mcnemar_exact_p(a, b):.3f}"
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
