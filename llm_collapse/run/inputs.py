"""The inputs of a comparison, built once so every model and method sees the same texts.

Lengths are measured under one reference tokenizer (the first model's); each model's own token counts are
recorded next to its results (the ``tokens`` metric), because the same text is a different number of tokens
for a different tokenizer and, for echo, twice as many positions.

Two designs for the corpus texts (``--design``): ``bins`` samples different texts into each bin [L, 1.1 L)
(`llm_collapse.data.bins.sample_length_binned`); ``prefix`` cuts the first L tokens of the same documents at
every length (`llm_collapse.data.prefixes.nested_prefixes`), so row i of every length is document i and
length contrasts are paired. Unset (the default), the design is ``prefix`` where the corpus can give the
documents (``prefix_docs`` or ``max_per_bin`` of them, each as long as the longest length) and ``bins``
otherwise (logged; `RunInputs.design` and run.json say which ran). A run that names ``prefix_docs`` asked for
the prefix design and is refused rather than switched.

The ``-start`` retrieval tasks (``passkey-start``, ``needle-start``) are a prefix sweep of their own: the same
documents cut to every length (`llm_collapse.data.synthetic.passkey_start_tasks`); `RunInputs.prefix_sweep`
lists the texts of both kinds of sweep for the ``--dry-run`` forward count.
"""

from __future__ import annotations

import logging

from llm_collapse.data import Document, load_corpus, sample_length_binned
from llm_collapse.data.bins import empty_bin, target_bins
from llm_collapse.data.placed import (
    MIN_FILLER_TOKENS,
    PlacedPassage,
    PlacementError,
    place_passages,
    short_passages,
)
from llm_collapse.data.position import POSITIONS, position_task
from llm_collapse.data.prefixes import PrefixDesignError, nested_prefixes
from llm_collapse.data.synthetic import (
    Draw,
    corpus_sentences,
    needle_start_tasks,
    needle_task,
    passkey_start_tasks,
    passkey_task,
)
from llm_collapse.errors import UserError
from llm_collapse.run.config import CompareConfig
from llm_collapse.tasks.inputs import RunInputs
from llm_collapse.tasks.registry import PLACED_FOLDS, binned_tasks, tasks_with
from llm_collapse.tasks.settings import PLACED_DEPTHS

logger = logging.getLogger(__name__)


class InputsError(UserError, ValueError):
    """The corpus cannot give texts for a requested length."""


def build_inputs(config: CompareConfig, tokenizer, documents: list[Document] | None = None) -> RunInputs:
    """Samples the length-binned texts and generates the retrieval tasks under ``tokenizer``.

    Args:
        config: The run's configuration.
        tokenizer: The reference tokenizer (the first model's).
        documents: The corpus, when already loaded (`llm_collapse.run.preflight`); read here otherwise.

    Raises:
        InputsError: A length for which the corpus holds no text at all (a bin that is only partly filled
            is logged and reported with its n, never refused).
        PrefixDesignError: ``design="prefix"`` (or ``prefix_docs`` set) and the corpus cannot give that many
            long texts.
        StartTaskError: A ``-start`` task's shortest length cannot hold its documents' key lines whole.
        PlacementError: The placed task cannot draw its passages (`placed_inputs`).
    """
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    inputs = RunInputs(tokenizer=name, retrieval_pool=config.retrieval_pool)
    if tasks_with(reads_corpus=True) & set(config.tasks):
        documents = load_corpus(config.corpus) if documents is None else documents
    if binned_tasks() & set(config.tasks):
        prefix, fallback = None, None
        if config.design != "bins":
            try:
                prefix = nested_prefixes(
                    documents,
                    tokenizer,
                    config.lengths,
                    n_docs=config.prefix_docs or config.max_per_bin,
                    seed=config.seed,
                    corpus=config.corpus,
                )
            except PrefixDesignError as err:
                if config.design == "prefix" or config.prefix_docs is not None:
                    raise
                logger.warning("design: bins, as the prefix design cannot be built: %s", err)
                fallback = err
        if prefix is not None:
            inputs.design, inputs.binned = "prefix", prefix
        else:
            inputs.binned = sample_length_binned(
                documents,
                tokenizer,
                target_bins(config.lengths),
                per_bin=config.max_per_bin,
                seed=config.seed,
            )
        _check_every_length(config, inputs, documents, tokenizer, fallback)
    draw = Draw(config.seed, config.retrieval_docs, config.retrieval_queries, tokenizer, fit_to_tokens=True)
    for task_name, make in (("passkey", passkey_task), ("needle", needle_task)):
        if task_name in config.tasks:
            inputs.retrieval[task_name] = [make(length, draw) for length in config.lengths]
    for task_name, make in (("passkey-start", passkey_start_tasks), ("needle-start", needle_start_tasks)):
        if task_name in config.tasks:  # StartTaskError (a UserError) when a length cannot hold a key line
            inputs.retrieval[task_name] = make(config.lengths, draw)
    if "position" in config.tasks:
        inputs.retrieval["position"] = [
            position_task(length, position, draw) for length in config.lengths for position in POSITIONS
        ]
    if "placed" in config.tasks:
        inputs.placed, inputs.placed_filler = (
            placed_inputs(config, tokenizer, documents),
            config.filler_corpus,
        )
    return inputs


def placed_inputs(config: CompareConfig, tokenizer, documents: list[Document]) -> list[PlacedPassage]:
    """The placed task's texts: ``max_per_bin`` passages of the corpus (one paragraph per document, balanced over
    the label's values, each short enough for the shortest length with filler), every one at every length and
    depth inside sentences of the filler corpus (`llm_collapse.data.placed`).

    Raises:
        PlacementError: Too few passages of some label value fit, or the label has one value.
    """
    values = {doc.labels.get(config.knn_label) for doc in documents} - {None}
    per_label = config.max_per_bin // max(len(values), 1)
    if len(values) > 1 and per_label < PLACED_FOLDS:
        raise PlacementError(
            f"--label {config.knn_label!r} has {len(values)} values in corpus {config.corpus!r}, so --max-per-bin "
            f"{config.max_per_bin} gives {per_label} passages per value, fewer than the logistic probe's "
            f"{PLACED_FOLDS} folds; use --max-per-bin >= {PLACED_FOLDS * len(values)} or a label with fewer values"
        )
    passages = short_passages(
        documents,
        config.knn_label,
        tokenizer,
        min(config.lengths) - MIN_FILLER_TOKENS,
        per_label,
        seed=config.seed,
    )
    filler = corpus_sentences(config.filler_corpus)
    depths = config.placed_depths or list(PLACED_DEPTHS)
    return place_passages(
        passages, config.knn_label, filler, tokenizer, sorted(config.lengths), depths, seed=config.seed
    )


def _check_every_length(
    config: CompareConfig, inputs: RunInputs, documents, tokenizer, fallback: Exception | None = None
) -> None:
    """Refuses, in one line with its cause (`llm_collapse.data.bins.empty_bin`), a length the bins design found
    no text for; ``fallback``: why the prefix design, tried first, could not be built."""
    empty = sorted(set(config.lengths) - set(inputs.by_length()))
    if not empty:
        return
    causes = [empty_bin(documents, tokenizer, b) for b in target_bins(empty)]
    corpus, named = repr(config.corpus), f"under the reference tokenizer {inputs.tokenizer!r}"
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
