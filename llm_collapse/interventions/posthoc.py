"""Post-hoc baselines as methods: transforms of finished embeddings, at no model cost (issue 43, item 7).

``posthoc:center`` (subtract each length's mean), ``posthoc:abtt[:D]`` (all-but-the-top, Mu & Viswanath
2018: remove the mean and the top D principal directions of the pooled embeddings; D defaults to d / 100) and
``posthoc:whiten`` (ZCA whitening, `llm_collapse.metrics.posthoc`). They join the methods of a run like an
intervention and get the same paired rows, so a reader can weigh an attention change against what a cheap
transform of the output does. Decisions:

- A post-hoc part never touches the model: the run embeds with the rest of the stack (``base`` for a plain
  ``posthoc:center``, from the same cache) and transforms the vectors a task asks for. Applying one to a model
  (`Embedder.intervene`, the mteb adapter) is refused.
- Whitening is cross-fitted: the items are split in two halves by item id (the same split at every length
  and for every method, so paired designs stay paired), each half is whitened by the transform fitted on the
  other, so no vector is whitened by a fit that saw it ("fitted on a held-out half"), and every item keeps
  its place for the paired contrasts.
- Centering needs each text's length, the split each text's item id: only the corpus tasks (collapse, knn)
  have them; other tasks are not applicable to a post-hoc method (recorded as such).
"""

from __future__ import annotations

import contextlib

import numpy as np
from torch import nn

from llm_collapse.interventions.base import (
    POSTHOC_KIND,
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
)

KINDS = ("center", "abtt", "whiten")
TASKS = ("collapse", "knn")
"""The tasks a post-hoc method applies to (their texts carry a length and an item id)."""
MIN_ITEMS = {"center": 2, "abtt": 3, "whiten": 4}
"""Texts per length a post-hoc method needs (whitening: two per half)."""


class PostHoc(Intervention):
    """A transform of finished embeddings reported as a method (module docstring)."""

    kind = POSTHOC_KIND

    def __init__(self, name: str, components: int | None = None) -> None:
        if name not in KINDS:
            raise InterventionError(
                f"posthoc:{name!r} is not allowed; use posthoc:center, posthoc:abtt[:D] or posthoc:whiten"
            )
        if components is not None and name != "abtt":
            raise InterventionError(f"posthoc:{name} takes no argument; only posthoc:abtt:D does")
        if components is not None and components < 0:
            raise InterventionError(
                f"posthoc:abtt:{components}: D counts directions to remove, so it is >= 0"
            )
        self.name, self.components = name, components

    @property
    def slug(self) -> str:
        return f"posthoc-{self.name}" + (f"{self.components}" if self.components is not None else "")

    def params(self) -> dict:
        return {
            "posthoc": self.name,
            **({"components": self.components} if self.components is not None else {}),
        }

    def _apply(self, model: nn.Module, context: ModelContext) -> contextlib.AbstractContextManager:
        raise NotApplicable(
            f"{self.slug} transforms finished embeddings and never runs inside a model; use it in --methods of "
            "llm-collapse compare, or apply llm_collapse.metrics.posthoc to your vectors"
        )

    def transform(self, X: np.ndarray, lengths: np.ndarray, ids: list[str], seed: int) -> np.ndarray:
        """The transformed (n, d) vectors of one task's texts (all lengths together)."""
        from llm_collapse.metrics import posthoc

        if self.name == "center":
            return posthoc.center_per_length(X, lengths)
        if self.name == "abtt":
            return posthoc.all_but_the_top(X, self.components)
        fit = posthoc.split_halves(ids, seed)
        out = np.empty(X.shape, dtype=np.float64)
        out[~fit] = posthoc.apply_whitening(posthoc.fit_whitening(X[fit]), X[~fit])
        out[fit] = posthoc.apply_whitening(posthoc.fit_whitening(X[~fit]), X[fit])
        return out


def check_fit(posthoc: PostHoc, n_texts: int, width: int | None, where: str) -> None:
    """Raises `InterventionError` (one line) before any embedding when ``posthoc`` cannot be fitted on the
    ``n_texts`` texts of a task (all lengths together) of vectors ``width`` wide (None: not known yet, only the
    count is checked): all-but-the-top needs ``0 <= D < min(n - 1, d)``, whitening two texts per half."""
    from llm_collapse.metrics.posthoc import default_abtt_components

    if posthoc.name == "abtt":
        default = posthoc.components is None
        if default and width is None:
            return
        components = default_abtt_components(width) if default else posthoc.components
        limit = n_texts - 1 if width is None else min(n_texts - 1, width)
        if not components < limit:
            what = f"its default D = d/100 = {components} (d = {width})" if default else f"D = {components}"
            raise InterventionError(
                f"{where}: {posthoc.slug} removes {what} directions, but {n_texts} texts span at most "
                f"{max(limit, 0)}; give posthoc:abtt:D with D < {max(limit, 0)} or more texts per length"
            )
    elif n_texts < MIN_ITEMS[posthoc.name]:
        raise InterventionError(
            f"{where}: {posthoc.slug} needs at least {MIN_ITEMS[posthoc.name]} texts, the run gives {n_texts}"
        )
