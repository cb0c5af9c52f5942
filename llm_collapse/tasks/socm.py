"""The socm task: second-order collapse (`llm_collapse.metrics.socm`; Hara et al., arXiv 2604.27398) by length,
from the last layer's token states of the forward that makes each embedding of the shared sample.

Rows per length (each paired against base and, under the prefix design, across lengths):

- ``token_concentration``: each text's c = tr Sigma after the unit-mean step (its mean, a t interval);
- ``socm``, ``socm_d_mu``, ``socm_d_sigma``: means over a regular design of pairs of texts (every pair up to
  ``socm_pairs``, else seeded circulant offsets: every text in the same number of pairs, the same pairs of items
  at every length and for every method), with a delete-one-text jackknife and t(n - 1); a text's item value is
  its mean over its pairs (their mean is the row's value);
- controls, each a metric: ``socm_subsample`` (every text's cloud from the same number of seeded tokens,
  ``socm_tokens``, so that estimation and content separate), ``socm_split_half`` (per text, SOCM between two
  seeded disjoint halves of its own tokens: what one text's cloud reads against itself at this length) and
  ``socm_trace_normalised`` (each Sigma divided by its trace: the unit-mean step divides by a mean-token norm that
  itself shrinks with length, so c moves with it); ``socm_excess`` is a pair's SOCM minus its two texts' mean
  split-half null (SOCM beyond what one text reads against itself);
- where the model's pooling leaves the input's first token out (a decoder's BOS: Gemma's state of massive norm),
  ``socm_with_first`` and ``token_concentration_with_first`` read the cloud with it.

Decisions:

- The tokens are those the model's pooling reads (its card's rule), handed on by `Embedder.observe_tokens` from
  the forward that makes the embedding (prefix sharing included); the task runs every text's forward
  (``ctx.encode(fresh=True)``: a cached vector runs none) and holds only per-text moments, never a batch's
  states beyond its forward. A 32k-token text's moments stream in chunks.
- A text whose mean token is near zero has no unit-mean scale: it is left out of its length, with a warning
  naming the count; its method's contrasts then hold other items and are skipped (logged).
- A last-token-pooled model pools one token, which has no cloud: its cloud is every input token but the first
  (the first with it), a diagnostic of its tokens, not of its embedding.
- No vLLM (its engine returns pooled vectors only): refused in one line with the config; PCW's chunk average has
  no one forward's states: not applicable, recorded.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from llm_collapse.errors import ConfigError
from llm_collapse.tasks.base import PairedItems, TaskContext, paired_key
from llm_collapse.tasks.sample import CorpusSample
from llm_collapse.tasks.socm_clouds import CloudParts, CloudStore, TextClouds, cloud_parts
from llm_collapse.tasks.task import (
    MORE_COLLAPSE_IF_HIGHER,
    MetricInfo,
    Options,
    Pass,
    RunView,
    Task,
    Workload,
    option,
)

logger = logging.getLogger(__name__)

TASK_NAME = "socm"
FORWARD_AND_STATISTICS = 1.05
"""Its forwards' seconds per second of a plain forward (the moments of every length included; the pairs are costed
apart): one gemma3-270m text measured 0.92x at 16k and 1.03x at 32k tokens (one repetition each, fp32, AMD EPYC:
reports/bench/socm_memory.json, ``python -m llm_collapse.bench.socm_memory --dtype fp32``)."""
PAIRED = (
    "socm", "socm_d_mu", "socm_d_sigma", "socm_excess", "socm_subsample", "socm_trace_normalised", "socm_with_first",
)  # fmt: skip
PER_TEXT = ("token_concentration", "socm_split_half", "token_concentration_with_first")


@dataclass(frozen=True)
class SocmOptions(Options):
    title: ClassVar[str] = "second-order collapse"
    socm_pairs: int = option(
        2016,
        help="most pairs of texts per length (every pair of up to 64 texts; beyond, a seeded regular sample: every "
        "text in the same number of pairs)",
    )
    socm_tokens: int = option(
        64,
        help="tokens per text of the fixed-size subsample control (seeded; a shorter text gives all of its own)",
    )

    def validate(self, run: RunView, task: str) -> SocmOptions:
        if self.socm_pairs < 1:
            raise ConfigError(f"--socm-pairs must be >= 1, got {self.socm_pairs}")
        if self.socm_tokens < 2:
            raise ConfigError(
                f"--socm-tokens must be >= 2 (a covariance of one token is 0), got {self.socm_tokens}"
            )
        if run.backend != "hf":
            raise ConfigError(
                f"--tasks {task} reads the model's token states, which backend {run.backend!r} does not return "
                "(its engine pools them); use --backend hf"
            )
        if run.per_length < 3:
            raise ConfigError(
                f"{run.per_length_flag} {run.per_length} is too few texts per length for the {task} task's "
                f"delete-one-text jackknife; use {run.per_length_flag} >= 3"
            )
        return self


class CloudCollector:
    """The observer of a cell's forwards (`Embedder.observe_tokens`): each text's cloud parts, keyed by text, and
    stored as they come (``store``) so that a stopped run resumes at the next document."""

    def __init__(
        self, tokens: int, seed: int, pooling: str = "mean", store: CloudStore | None = None
    ) -> None:
        self.tokens, self.seed, self.pooling, self.store = tokens, seed, pooling, store
        self.parts: dict[str, CloudParts] = {}

    def __call__(self, text: str, states, mask) -> None:
        parts = cloud_parts(text, states, mask, tokens=self.tokens, seed=self.seed, pooling=self.pooling)
        self.parts[text] = parts
        if self.store is not None:
            self.store.put(text, parts)

    def read_stored(self, texts: list[str]) -> list[str]:
        """Takes the stored parts of ``texts``; returns the texts still to run."""
        if self.store is None:
            return list(texts)
        for text in texts:
            if text not in self.parts and (parts := self.store.get(text)) is not None:
                self.parts[text] = parts
        return [text for text in texts if text not in self.parts]

    def clouds(self) -> tuple[dict[str, TextClouds], set[str]]:
        """Each text's clouds, and the texts refused (a near-zero mean token)."""
        from llm_collapse.metrics.socm import MeanTooSmall

        clouds, refused = {}, set()
        for text, parts in self.parts.items():
            try:
                clouds[text] = parts.clouds()
            except MeanTooSmall:
                refused.add(text)
        return clouds, refused


def pair_design(n: int, most: int, seed: int) -> np.ndarray:
    """(m, 2) item indices of a regular design of pairs of ``n`` items: every pair where there are at most
    ``most``, else ``most // n`` seeded circulant offsets k (pairs (i, i + k mod n), k < n / 2: every item in two
    pairs per offset), at least one."""
    if n < 2:
        return np.zeros((0, 2), dtype=int)
    if n * (n - 1) // 2 <= most:
        return np.array([(i, j) for i in range(n) for j in range(i + 1, n)])
    offsets = np.arange(1, (n - 1) // 2 + 1)
    chosen = np.random.default_rng(seed).choice(
        offsets, size=max(1, min(len(offsets), most // n)), replace=False
    )
    return np.array([(i, (i + k) % n) for k in sorted(chosen) for i in range(n)])


def _per_item(values: np.ndarray, pairs: np.ndarray, n: int) -> np.ndarray:
    """Each item's mean over its pairs (a regular design: the same count for every item)."""
    total, count = np.zeros(n), np.zeros(n)
    for (i, j), value in zip(pairs, values, strict=True):
        total[[i, j]] += value
        count[[i, j]] += 1
    return total / np.maximum(count, 1)


def _pair_values(clouds: list[TextClouds], pairs: np.ndarray) -> dict[str, np.ndarray]:
    """Every paired metric's value per pair."""
    from llm_collapse.metrics.socm import cloud_terms

    out = {name: np.zeros(len(pairs)) for name in PAIRED}
    for p, (i, j) in enumerate(pairs):
        a, b = clouds[i], clouds[j]
        terms = cloud_terms(a.cloud, b.cloud)
        out["socm"][p], out["socm_d_mu"][p], out["socm_d_sigma"][p] = terms.socm, terms.d_mu, terms.d_sigma
        # BW^2 of Sigma / tr Sigma: 2 - 2 x the cross term / sqrt(c_a c_b), the cross term from BW^2 itself
        ca, cb = a.cloud.concentration, b.cloud.concentration
        cross = (ca + cb - 4 * terms.d_sigma) / 2
        normalised = max(0.0, 2.0 - 2.0 * cross / math.sqrt(ca * cb)) / 4 if ca > 0 and cb > 0 else math.nan
        out["socm_trace_normalised"][p] = (1 - terms.d_mu) * normalised
        out["socm_excess"][p] = terms.socm - (a.split_half + b.split_half) / 2
        out["socm_subsample"][p] = cloud_terms(a.subsample, b.subsample).socm
        if a.with_first is not None and b.with_first is not None:
            out["socm_with_first"][p] = cloud_terms(a.with_first, b.with_first).socm
        else:
            out["socm_with_first"][p] = math.nan
    return out


def run_socm(ctx: TaskContext, sample: CorpusSample, options: SocmOptions) -> list[dict]:
    from llm_collapse.metrics.contrasts import (
        jackknife_from_leave_one_out,
        mean_difference,
        pair_mean_leave_one_out,
    )

    pooling = ctx.embedder.spec.pooling
    store = None
    if ctx.cache is not None:
        store = CloudStore.beside(
            ctx.cache.directory, tokens=options.socm_tokens, seed=ctx.seed, pooling=pooling
        )
    collector = CloudCollector(options.socm_tokens, ctx.seed, pooling, store)
    groups = sample.by_length()
    texts = [t.text for length in sorted(groups) for t in groups[length]]
    missing = texts if ctx.overwrite else collector.read_stored(texts)
    if len(missing) < len(texts):
        logger.info("%s x %s: socm: %d of %d texts' token clouds from the cache", ctx.model, ctx.method,
                    len(texts) - len(missing), len(texts))  # fmt: skip
    if missing:
        with ctx.embedder.observe_tokens(collector):
            ctx.encode(missing, fresh=True)  # every forward runs: the collector reads its token states
    all_clouds, refused = collector.clouds()
    if refused:
        logger.warning(
            "%s x %s: %d text(s) with a near-zero mean token (no unit-mean scale) left out of the socm rows",
            ctx.model, ctx.method, len(refused),
        )  # fmt: skip
    rows = []
    for length in sorted(groups):
        kept = sorted((t for t in groups[length] if t.text in all_clouds), key=lambda t: t.item_id)
        ids, clouds = tuple(t.item_id for t in kept), [all_clouds[t.text] for t in kept]
        n = len(kept)
        per_text = {
            "token_concentration": np.array([c.cloud.concentration for c in clouds]),
            "socm_split_half": np.array([c.split_half for c in clouds]),
        }
        if clouds and all(c.with_first is not None for c in clouds):
            per_text["token_concentration_with_first"] = np.array(
                [c.with_first.concentration for c in clouds]
            )
        for metric, values in per_text.items():
            contrast = mean_difference(values)
            rows.append(ctx.row(task=TASK_NAME, length=length, metric=metric, value=contrast.estimate,
                                ci=(contrast.low, contrast.high), n=n))  # fmt: skip
            ctx.paired[paired_key(TASK_NAME, length, metric=metric)] = PairedItems(
                metric, values, continuous=True, ids=ids
            )
        pairs = pair_design(n, options.socm_pairs, ctx.seed)
        by_pair = _pair_values(clouds, pairs)
        for metric, values in by_pair.items():
            if not np.isfinite(values).all():
                continue  # socm_with_first where pooling reads the first token
            items = _per_item(values, pairs, n)
            point, loo = pair_mean_leave_one_out(items)
            contrast = jackknife_from_leave_one_out(point, loo)
            rows.append(ctx.row(task=TASK_NAME, length=length, metric=metric, value=contrast.estimate,
                                ci=(contrast.low, contrast.high), n=n))  # fmt: skip
            ctx.paired[paired_key(TASK_NAME, length, metric=metric)] = PairedItems(
                metric, items, pairwise=True, ids=ids
            )
        above = int(np.sum(by_pair["socm_d_sigma"] > 1))
        if above:
            logger.warning("%s x %s at %d: d_sigma above 1 in %d of %d pairs (not clipped)",
                           ctx.model, ctx.method, length, above, len(pairs))  # fmt: skip
    return rows


def design_size(n: int, most: int) -> int:
    """The number of pairs `pair_design` gives ``n`` items."""
    if n * (n - 1) // 2 <= most:
        return n * (n - 1) // 2
    return n * max(1, min((n - 1) // 2, most // n))


def socm_workload(run: RunView, options: SocmOptions, device: str) -> Workload:
    """Every sample text's forward again (it observes their token states) with its moments, and the pairs."""
    pairs = design_size(run.per_length, options.socm_pairs)
    says = (
        f"{run.per_length} texts per length run again for their token clouds, {pairs} pairs of them compared"
    )
    return Workload(passes=(Pass(says, run.per_length, FORWARD_AND_STATISTICS, pairs=pairs),))


TASK = Task(
    name=TASK_NAME,
    title="Second-order collapse (token clouds behind mean pooling)",
    run=run_socm,
    metrics={
        "socm": MetricInfo(
            "SOCM: (1 - d_mu) d_sigma, mean over pairs",
            MORE_COLLAPSE_IF_HIGHER,
            paired=True,
            set_level=True,
            digits=4,
        ),
        "socm_d_mu": MetricInfo(
            "d_mu: |mu_x - mu_y|^2 / 4 (means)", "", paired=True, set_level=True, digits=4
        ),
        "socm_d_sigma": MetricInfo(
            "d_sigma: BW^2 / 4 (token clouds' shapes)", "", paired=True, set_level=True, digits=4
        ),
        "token_concentration": MetricInfo(
            "token concentration c = tr Sigma (unit mean)", "", paired=True, digits=4
        ),
        "socm_excess": MetricInfo(
            "SOCM beyond the two texts' split-half nulls",
            MORE_COLLAPSE_IF_HIGHER,
            paired=True,
            set_level=True,
            digits=4,
        ),
        "socm_subsample": MetricInfo(
            "SOCM of fixed-size token subsamples (control)",
            MORE_COLLAPSE_IF_HIGHER,
            paired=True,
            set_level=True,
            digits=4,
        ),
        "socm_split_half": MetricInfo(
            "SOCM of a text's two halves (null, control)", "", paired=True, digits=4
        ),
        "socm_trace_normalised": MetricInfo(
            "SOCM with each Sigma over its trace (control)",
            MORE_COLLAPSE_IF_HIGHER,
            paired=True,
            set_level=True,
            digits=4,
        ),
        "socm_with_first": MetricInfo(
            "SOCM with the first input token (BOS)",
            MORE_COLLAPSE_IF_HIGHER,
            paired=True,
            set_level=True,
            digits=4,
        ),
        "token_concentration_with_first": MetricInfo(
            "token concentration with the first input token", "", paired=True, digits=4
        ),
    },
    options=SocmOptions,
    workload=socm_workload,
    headline=("socm", "token_concentration"),
    sample=True,
    vectors_only=False,
)
