"""The run's shared corpus sample: texts per length, built once under the reference tokenizer and read by every
task that says ``sample=True`` (collapse, knn, layerwise, quantization), the same for every model and method.

Lengths are measured under one reference tokenizer (the first model's); each model's own token counts are
recorded next to its results (the ``tokens`` metric), because the same text is a different number of tokens
for a different tokenizer and, for echo, twice as many positions.

Two designs (``--design``): ``bins`` samples different texts into each bin [L, 1.1 L)
(`llm_collapse.data.bins.sample_length_binned`); ``prefix`` cuts the first L tokens of the same documents at
every length (`llm_collapse.data.prefixes.nested_prefixes`), so row i of every length is document i and
length contrasts are paired. Unset (the default), the design is ``prefix`` where the corpus can give the
documents (``prefix_docs`` or ``max_per_bin`` of them, each as long as the longest length) and ``bins``
otherwise (logged; `CorpusSample.design` and run.json say which ran). A run that names ``prefix_docs`` asked
for the prefix design and is refused rather than switched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from llm_collapse.data import Document, sample_length_binned
from llm_collapse.data.bins import BinnedText, empty_bin, target_bins
from llm_collapse.data.prefixes import PrefixDesignError, documents_joined, nested_prefixes
from llm_collapse.errors import UserError
from llm_collapse.tasks.task import RunView, TaskInputs

logger = logging.getLogger(__name__)


class InputsError(UserError, ValueError):
    """The corpus cannot give texts for a requested length."""


@dataclass
class CorpusSample(TaskInputs):
    """The corpus texts per length bin, in length order, and the design that chose them."""

    texts: list[BinnedText] = field(default_factory=list)
    design: str = "bins"

    def by_length(self) -> dict[int, list[BinnedText]]:
        groups: dict[int, list[BinnedText]] = {}
        for text in self.texts:
            groups.setdefault(text.target_tokens, []).append(text)
        return groups

    def documents(self) -> list[str]:
        return [t.text for t in self.texts]

    def counted(self) -> list[tuple[str, int]]:
        return [(t.text, t.n_tokens) for t in self.texts]

    def sweep(self) -> tuple[list[str], list[str]]:
        """The prefix design's texts and the longest of each document (none under the bins design)."""
        if self.design != "prefix" or not self.texts:
            return [], []
        top = max(t.target_tokens for t in self.texts)
        return [t.text for t in self.texts], [t.text for t in self.texts if t.target_tokens == top]

    def describe(self) -> dict:
        """The design (for the prefix design also its N and how many texts joined corpus documents) and the texts
        per length."""
        design: dict = {"design": self.design}
        if self.design == "prefix":
            design["prefix_docs"] = len(next(iter(self.by_length().values()), []))
            design["prefix_docs_concatenated"] = documents_joined(self.texts)
        return {**design, "texts_per_length": {str(k): len(v) for k, v in sorted(self.by_length().items())}}


def build_sample(run: RunView, tokenizer, documents: list[Document]) -> CorpusSample:
    """The sample of ``run``'s design, lengths and sizes from ``documents`` under ``tokenizer``.

    Raises:
        InputsError: A length for which the corpus holds no text at all (a bin that is only partly filled
            is logged and reported with its n, never refused).
        PrefixDesignError: ``design="prefix"`` (or ``prefix_docs`` set) and the corpus cannot give that many
            long texts.
    """
    fallback = None
    if run.design != "bins":
        try:
            texts = nested_prefixes(
                documents, tokenizer, run.lengths, n_docs=run.per_length, seed=run.seed, corpus=run.corpus
            )
            return CorpusSample(texts, "prefix")
        except PrefixDesignError as err:
            if run.design == "prefix" or run.prefix_docs is not None:
                raise
            logger.warning("design: bins, as the prefix design cannot be built: %s", err)
            fallback = err
    bins = target_bins(run.lengths)
    sample = CorpusSample(
        sample_length_binned(documents, tokenizer, bins, per_bin=run.max_per_bin, seed=run.seed)
    )
    _check_every_length(run, sample, documents, tokenizer, fallback)
    return sample


def _check_every_length(
    run: RunView, sample: CorpusSample, documents, tokenizer, fallback: Exception | None = None
) -> None:
    """Refuses, in one line with its cause (`llm_collapse.data.bins.empty_bin`), a length the bins design found
    no text for; ``fallback``: why the prefix design, tried first, could not be built."""
    empty = sorted(set(run.lengths) - set(sample.by_length()))
    if not empty:
        return
    causes = [empty_bin(documents, tokenizer, b) for b in target_bins(empty)]
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    corpus, named = repr(run.corpus), f"under the reference tokenizer {name!r}"
    said = []
    if short := [c for c in causes if c.too_long]:
        longest = short[0].longest
        said.append(
            f"--lengths {','.join(str(c.bin.target) for c in short)}: corpus {corpus} has no text that long "
            f"{named} (longest document: {longest} tokens; a text of the bins design lies within one "
            f"document); use lengths up to {longest} or a corpus of longer documents"
        )
    for cause in (c for c in causes if not c.too_long):
        said.append(
            f"--lengths {cause.bin.target}: corpus {corpus} has no text for it{'' if short else ' ' + named}: "
            f"{cause.describe()}; the bin's width (10%) is fixed, so use a length such a run reaches, or split "
            "the paragraphs with more blank lines"
        )
    said.append(
        f"the prefix design, tried first, cannot be built either: {fallback}"
        if fallback is not None
        else "or --design prefix, which cuts every text at exactly L tokens and runs on into the following "
        "documents"
    )
    raise InputsError("; ".join(said))
