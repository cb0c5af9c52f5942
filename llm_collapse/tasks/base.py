"""What every task receives: a cell (`TaskContext`: the embedder in its intervention state, the cache, the run's
seed and corpus), and the paired contrasts the runner computes from what the tasks leave in it.

Paired contrasts against ``base``: every method sees the same texts, so a method's difference from
``base`` has a paired interval that is much narrower than the two per-method intervals suggest. Tasks
leave the per-item data behind each bin in ``TaskContext.paired`` (`PairedItems`, keyed by `paired_key`):
collapse its (n, d) embeddings, knn its per-text leave-one-out correctness, passkey/needle/position their
per-query top-1 hits, layerwise its (n, layers) per-text statistics. The runner keeps these per (model, method)
in memory until every method of the model has run, then `contrast_rows` turns them into ``*_vs_base`` rows
(method = the non-base method, same task, length and depth). Bins whose item counts differ between the two are skipped with a warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from llm_collapse.encoding.keys import text_hash
from llm_collapse.records.results import CellKey, result_row
from llm_collapse.records.saved_embeddings import SavedEmbeddings
from llm_collapse.tasks.sample import CorpusSample
from llm_collapse.tasks.task import VS_BASE, VS_SHORTEST

if TYPE_CHECKING:  # the model code: imported where a cell embeds, not where a task is declared
    from llm_collapse.embedder import Embedder
    from llm_collapse.encoding.cache import EmbeddingCache
    from llm_collapse.interventions.posthoc import PostHoc

logger = logging.getLogger(__name__)

BASE_METHOD = "base"
EMBEDDINGS = "embeddings"  # PairedItems.metric of collapse bins: one bin's embeddings

PairedKey = tuple[str, int, float | None]  # (task, length, depth or None)


@dataclass(frozen=True)
class PairedItems:
    """Per-item data behind one bin's rows, in item order, kept for contrasts against ``base``.

    Attributes:
        metric: The per-method metric the items back (``acc@1``, ``knn_accuracy``), or `EMBEDDINGS`.
        values: (n,) 0/1 correctness per item, or (n, d) embeddings for `EMBEDDINGS`.
        reference: For `EMBEDDINGS`: the cell's global centroid (all lengths), so the items' distances to it
            (``global_centroid_distance``, the TempScale paper's collapse distance) get paired contrasts too.
        per_layer: ``values`` is (n, layers) of continuous per-item statistics (layerwise): one contrast per
            layer, a paired t-test over the items where neither side is NaN.
        continuous: ``values`` is (n,) of continuous per-item values (the quantization drift's per-text
            cosines), not 0/1 outcomes: a paired t-test instead of McNemar.
        pairwise: ``values`` is (n,) of each item's mean of a pair statistic over a regular design of pairs
            (every item in as many pairs, `llm_collapse.tasks.socm`): the bin's value is the mean over pairs,
            read by a delete-one-item jackknife with t(n - 1) (`llm_collapse.metrics.contrasts.pair_mean_leave_one_out`).
        ids: (n,) item ids for the per-item results (`llm_collapse.tasks.items`): a text's
            `BinnedText.item_id`, a query's ``q<i>``; empty where a task keeps none.
        extra: Further (n,) or (n, k) per-item quantities that only the per-item results keep (a query's
            gold rank, a text's neighbour lengths).
    """

    metric: str
    values: np.ndarray
    reference: np.ndarray | None = None
    per_layer: bool = False
    continuous: bool = False
    pairwise: bool = False
    ids: tuple[str, ...] = ()
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def paired_key(task: str, length: int, depth: float = math.nan, metric: str = "") -> PairedKey:
    """Dictionary key of one bin (NaN depth -> None: NaN never equals itself).

    A task's second paired metric of the same bin (knn's ``knn_cross_accuracy``) is keyed ``"task/metric"``;
    `paired_task` reads the task back.
    """
    return (f"{task}/{metric}" if metric else task, int(length), None if math.isnan(depth) else float(depth))


def paired_task(name: str) -> str:
    """The task of a paired key's first element: ``"knn/knn_cross_accuracy"`` -> ``"knn"``."""
    return name.partition("/")[0]


@dataclass
class CellRecord:
    """What one (model, method) cell adds to its model's run.json entry (the runner copies it there).

    Attributes:
        truncated: Distinct texts cut to the token cap (tasks share texts: collapse and knn).
        oom_retries: One line per out-of-memory retry (the smaller batch and token budget).
        not_applicable: Parts of the cell's work that could not run, and why (a quantized variant).
        variants: The quantization task's variants: `Embedder.describe` and load/embed seconds each.
    """

    truncated: int = 0
    oom_retries: list[str] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)
    variants: dict[str, dict] = field(default_factory=dict)


@dataclass
class TaskContext:
    """One (model, method) cell of a comparison: what every task's runner receives beside its inputs and options.

    Attributes:
        embedder: The loaded embedder, with the method's interventions applied.
        model: Model name as given in the config.
        method: Intervention slug.
        cache: Embedding cache for this embedder state.
        corpus: The run's corpus name, recorded in every row.
        seed: Sampling and bootstrap seed.
        batch_size: Most texts per forward pass (halved on out-of-memory, per cell).
        tasks: Every task of the run (the quantization task leaves collapse rows to ``collapse`` when it runs).
        sample: The run's shared corpus sample (`llm_collapse.tasks.sample`), where a task reads it: a post-hoc
            method reads each text's length and item id there.
        paired_lengths: The tasks whose items are the same at every length in this run (they get
            ``*_vs_shortest`` rows).
        overwrite: Recompute every embedding once in this cell instead of reading the cache.
        record: What the cell adds to run.json (`CellRecord`).
        paired: Per-item data of each bin for the runner's contrasts against ``base`` (module docstring).
        saved: `llm_collapse.records.saved_embeddings.SavedEmbeddings`: every vector `encode` embeds is kept there
            (``--save-embeddings``), or, where it was read from a run, served from there instead (a recompute:
            no model runs); the vectors before any post-hoc transform.
        load_variant: ``(quant, dtype) -> Embedder``: the cell's model loaded again as the run would load it
            with that quantization (the quantization task's variants); None where no model loads (a recompute).
    """

    embedder: Embedder
    model: str
    method: str
    cache: EmbeddingCache | None = None
    corpus: str = ""
    seed: int = 0
    batch_size: int = 16
    tasks: tuple[str, ...] = ()
    sample: CorpusSample | None = None
    paired_lengths: frozenset[str] = frozenset()
    overwrite: bool = False
    record: CellRecord = field(default_factory=CellRecord)
    paired: dict[PairedKey, PairedItems] = field(default_factory=dict)
    _recomputed: set[tuple[str, str]] = field(default_factory=set)
    _truncated: set[tuple[str, str]] = field(default_factory=set)
    posthoc: PostHoc | None = None  # transforms what encode returns
    saved: SavedEmbeddings | None = None
    load_variant: Callable[[str, str], Embedder] | None = None

    @property
    def key(self) -> CellKey:
        """The model, method and corpus every row of this cell carries."""
        return CellKey(self.model, self.method, self.corpus)

    def row(self, **kwargs) -> dict:
        return result_row(**self.key.fields(), **kwargs)

    def encode(self, texts: list[str], *, kind: str = "document", fresh: bool = False) -> np.ndarray:
        """Cached encoding; an out-of-memory error halves the batch and token budget and retries (recorded).

        ``fresh``: every text runs its forward (the vectors still go to the cache), for a task that observes the
        forwards' token states (`Embedder.observe_tokens`): a cached vector runs none."""
        encoded = self.embedder.tokenize(texts, kind=kind)
        self._truncated.update((kind, t) for t, e in zip(texts, encoded, strict=True) if e.truncated)
        self.record.truncated = len(self._truncated)  # distinct texts: tasks share texts (collapse and knn)
        while True:
            try:
                vectors = self._vectors(texts, kind, fresh)
                return vectors if self.posthoc is None else self._transformed(texts, vectors)
            except (MemoryError, RuntimeError) as err:  # torch.OutOfMemoryError is a RuntimeError
                if not _is_out_of_memory(err) or (
                    self.embedder.max_tokens_per_batch <= 1 and self.batch_size <= 1
                ):
                    raise
                self.embedder.max_tokens_per_batch = max(1, self.embedder.max_tokens_per_batch // 2)
                self.batch_size = max(1, self.batch_size // 2)
                retry = f"{type(err).__name__}: batch_size -> {self.batch_size}, tokens -> {self.embedder.max_tokens_per_batch}"
                self.record.oom_retries.append(retry)
                logger.warning("%s/%s out of memory; retrying with %s", self.model, self.method, retry)

    def _transformed(self, texts: list[str], vectors: np.ndarray) -> np.ndarray:
        """The post-hoc method's transform of one task's vectors, given each text's length and item id."""
        from llm_collapse.interventions import NotApplicable

        known = {t.text: t for t in (self.sample.texts if self.sample is not None else [])}
        if any(text not in known for text in texts):
            raise NotApplicable(
                f"{self.method} needs each text's length and item id: only corpus texts have them"
            )
        lengths = np.array([known[text].target_tokens for text in texts])
        ids = [known[text].item_id for text in texts]
        return self.posthoc.transform(vectors, lengths, ids, self.seed).astype(np.float32)

    def _vectors(self, texts: list[str], kind: str, fresh: bool = False) -> np.ndarray:
        """The model's vectors of ``texts`` (`_encode_once`), kept in ``saved``; or, where ``saved`` was read from
        a run, served from it (keyed as `llm_collapse.records.saved_embeddings` says)."""
        if self.saved is None:
            return self._encode_once(texts, kind, fresh)
        instruction = self.embedder.resolve_instruction(kind, None)
        hashes = [text_hash(text, kind, instruction) for text in texts]
        group = (self.model, self.embedder.interventions)
        if self.saved.replaying:
            return self.saved.get(*group, hashes)
        vectors = self._encode_once(texts, kind, fresh)
        self.saved.add(*group, hashes, vectors)
        return vectors

    def _encode_once(self, texts: list[str], kind: str, everything: bool = False) -> np.ndarray:
        """With ``overwrite``, texts not yet recomputed in this cell are embedded again, the rest cached; with
        ``everything``, every text is embedded again."""
        from llm_collapse.encoding.cached import encode_cached

        if everything:
            self._recomputed.update((kind, t) for t in texts)
            return encode_cached(
                self.embedder, texts, kind=kind, cache=self.cache, batch_size=self.batch_size, overwrite=True
            )
        fresh = [t for t in texts if (kind, t) not in self._recomputed] if self.overwrite else []
        if fresh:
            encode_cached(
                self.embedder, fresh, kind=kind, cache=self.cache, batch_size=self.batch_size, overwrite=True
            )
            self._recomputed.update((kind, t) for t in fresh)
        return encode_cached(self.embedder, texts, kind=kind, cache=self.cache, batch_size=self.batch_size)


def proportion_row(
    ctx: TaskContext,
    key: PairedKey,
    metric: str,
    correct: np.ndarray | None,
    ids: tuple[str, ...],
    *,
    extra: dict[str, np.ndarray] | None = None,
) -> dict:
    """One accuracy row of bin ``key`` (task, length, depth): the mean of per-item 0/1 ``correct`` with its
    Wilson interval over the ``ids`` (treated as independent), which also go to ``ctx.paired`` under ``key``
    (with ``extra``, for the per-item results); NaN where ``correct`` is None (a probe without enough items:
    its function said why)."""
    from llm_collapse.metrics.proportions import wilson_interval

    n = len(ids)
    if correct is None or n == 0:
        value, ci = math.nan, (math.nan, math.nan)
    else:
        value, ci = float(np.mean(correct)), wilson_interval(int(np.sum(correct)), n)
        ctx.paired[key] = PairedItems(metric, np.asarray(correct), ids=tuple(ids), extra=extra or {})
    depth = math.nan if key[2] is None else key[2]
    return ctx.row(
        task=paired_task(key[0]), length=key[1], metric=metric, depth=depth, value=value, ci=ci, n=n
    )


def contrast_rows(
    cell: CellKey,
    items: dict[PairedKey, PairedItems],
    base: dict[PairedKey, PairedItems],
    *,
    suffix: str = VS_BASE,
) -> list[dict]:
    """``*_vs_base`` rows of one method: value = metric(method) - metric(base) on the same items.

    ``suffix`` names the contrast (`length_contrast_rows` passes `VS_SHORTEST`, with ``base`` = the
    shortest length's items relabelled to each length's key).

    One procedure per outcome type (`llm_collapse.metrics.contrasts`), none of them seeded: embeddings give
    ``pairwise_cosine_vs_base`` and ``centroid_distance_vs_base`` (set-level: paired delete-one jackknife,
    t(n - 1) interval and test; runs before 2026-12-08 stored its normal interval without a p-value, and before
    2026-12-06 a paired bootstrap for the cosine); correctness gives ``<metric>_vs_base``
    (Newcombe's method-10 interval and the exact McNemar p-value; runs before 2026-12-05 stored a paired
    bootstrap interval); continuous per-item values give one ``<metric>_vs_base`` row and per-layer
    statistics one per layer (`paired_t_contrast`: t interval; a bootstrap before 2026-12-06). Bins absent
    from either side are skipped.
    """
    from llm_collapse.metrics.collapse import centroid_distance
    from llm_collapse.metrics.contrasts import paired_binary
    from llm_collapse.metrics.stats import paired_jackknife

    rows = []
    for key in sorted(items, key=lambda k: (k[0], k[1], -1.0 if k[2] is None else k[2])):
        if key not in base or items[key].metric != base[key].metric:
            continue
        task, length, depth = paired_task(key[0]), key[1], key[2]
        mine, theirs = items[key].values, base[key].values
        if mine.shape[0] != theirs.shape[0]:
            logger.warning("%s %s: %d items vs %d for base; no contrast", cell, key, len(mine), len(theirs))
            continue
        n = int(mine.shape[0])
        row = dict(**cell.fields(), task=task, length=length, n=n)
        row["depth"] = math.nan if depth is None else depth
        if items[key].per_layer:
            rows += _per_layer_contrasts(row, items[key].metric + suffix, mine, theirs)
        elif items[key].metric == EMBEDDINGS:
            cosine = _paired_cosine_jackknife(mine, theirs)  # O(n d): delete-one values from per-item terms
            distance = paired_jackknife(mine, theirs, centroid_distance)
            for metric, c in (("pairwise_cosine", cosine), ("centroid_distance", distance)):
                rows.append(result_row(**row, metric=metric + suffix, value=c.estimate, ci=(c.low, c.high),
                                       p_value=c.p))  # fmt: skip
            if items[key].reference is not None and base[key].reference is not None:
                for contrast in (
                    _global_distance_contrast(items[key], base[key]),
                    *_decomposition_contrasts(items[key], base[key]),
                ):
                    contrast["metric"] += suffix
                    rows.append(result_row(**row, **contrast))
        elif items[key].pairwise:
            point, low, high, p_value = pair_mean_contrast(mine - theirs)
            rows.append(result_row(**row, metric=items[key].metric + suffix, value=point, ci=(low, high),
                                   p_value=p_value))  # fmt: skip
        elif items[key].continuous:
            point, low, high, p_value = paired_t_contrast(mine, theirs)
            metric = items[key].metric + suffix
            rows.append(result_row(**row, metric=metric, value=point, ci=(low, high), p_value=p_value))
        else:  # 0/1 outcomes: Newcombe's interval (a bootstrap's can exclude 0 where McNemar cannot reject)
            c = paired_binary(mine, theirs)
            rows.append(
                result_row(
                    **row,
                    metric=items[key].metric + suffix,
                    value=c.estimate,
                    ci=(c.low, c.high),
                    p_value=c.p,
                )
            )
    return rows


def _paired_cosine_jackknife(mine: np.ndarray, theirs: np.ndarray):
    """The paired delete-one jackknife of ``mean_pairwise_cosine(mine) - mean_pairwise_cosine(theirs)`` from each
    item's mean cosine to the others (`llm_collapse.metrics.contrasts.pairwise_cosine_leave_one_out`): the
    interval `paired_jackknife_ci` gives, in O(n d) instead of O(n^2 d)."""
    from llm_collapse.metrics.collapse import per_item_pairwise_cosine
    from llm_collapse.metrics.contrasts import jackknife_from_leave_one_out, pairwise_cosine_leave_one_out

    a, loo_a = pairwise_cosine_leave_one_out(per_item_pairwise_cosine(mine))
    b, loo_b = pairwise_cosine_leave_one_out(per_item_pairwise_cosine(theirs))
    return jackknife_from_leave_one_out(a - b, loo_a - loo_b)


def _per_layer_contrasts(row: dict, metric: str, mine: np.ndarray, theirs: np.ndarray) -> list[dict]:
    """One paired row per layer column of (n, layers) statistics; items NaN on either side are left out."""

    rows = []
    for layer in range(mine.shape[1]):
        a, b = mine[:, layer], theirs[:, layer]
        keep = ~(np.isnan(a) | np.isnan(b))
        point, low, high, p_value = paired_t_contrast(a[keep], b[keep])
        cell = {**row, "n": int(keep.sum())}
        rows.append(
            result_row(**cell, layer=layer, metric=metric, value=point, ci=(low, high), p_value=p_value)
        )
    return rows


def _global_distance_contrast(mine: PairedItems, theirs: PairedItems) -> dict:
    """Paired difference of the items' mean distance to their own side's global centroid (`paired_t_contrast`)."""
    from llm_collapse.metrics.collapse import normalize_rows

    a = np.linalg.norm(normalize_rows(mine.values) - mine.reference.reshape(1, -1), axis=1)
    b = np.linalg.norm(normalize_rows(theirs.values) - theirs.reference.reshape(1, -1), axis=1)
    point, low, high, p_value = paired_t_contrast(a, b)
    return dict(metric="global_centroid_distance", value=point, ci=(low, high), p_value=p_value)


def _decomposition_contrasts(mine: PairedItems, theirs: PairedItems) -> list[dict]:
    """Paired differences of the decomposition's three terms (`llm_collapse.metrics.decomposition`), each side
    against its own global centroid: the whole from the per-item squared distances (`paired_t_contrast`), the
    spread and the offset by a paired delete-one jackknife (they move with the length's own centroid)."""
    from llm_collapse.metrics.contrasts import jackknife
    from llm_collapse.metrics.decomposition import DECOMPOSITION_KEYS, centroid_decomposition

    def term(key: str):
        return lambda pairs: (
            centroid_decomposition(pairs[:, 0], mine.reference).summary()[key]
            - centroid_decomposition(pairs[:, 1], theirs.reference).summary()[key]
        )

    a = centroid_decomposition(mine.values, mine.reference).global_sq
    b = centroid_decomposition(theirs.values, theirs.reference).global_sq
    point, low, high, p_value = paired_t_contrast(a, b)
    out = [dict(metric=DECOMPOSITION_KEYS[0], value=point, ci=(low, high), p_value=p_value)]
    pairs = np.stack([mine.values, theirs.values], axis=1)  # (n, 2, d)
    for key in DECOMPOSITION_KEYS[1:]:
        c = jackknife(pairs, term(key))
        out.append(dict(metric=key, value=c.estimate, ci=(c.low, c.high), p_value=c.p))
    return out


def paired_t_contrast(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """mean(a - b) of continuous per-item values: point, t interval and paired t-test p-value
    (`llm_collapse.metrics.contrasts.paired_t`; NaN interval and test with fewer than two items)."""
    from llm_collapse.metrics.contrasts import paired_t

    contrast = paired_t(a, b)
    return contrast.estimate, contrast.low, contrast.high, contrast.p


def pair_mean_contrast(d: np.ndarray) -> tuple[float, float, float, float]:
    """The mean over pairs of a linear combination of pairwise items' values (``d``: per-item, e.g. method - base):
    point, t(n - 1) jackknife interval and p-value."""
    from llm_collapse.metrics.contrasts import jackknife_from_leave_one_out, pair_mean_leave_one_out

    c = jackknife_from_leave_one_out(*pair_mean_leave_one_out(d))
    return c.estimate, c.low, c.high, c.p


def length_contrast_rows(
    cell: CellKey,
    items: dict[PairedKey, PairedItems],
    tasks: set[str] | frozenset[str],
) -> list[dict]:
    """``*_vs_shortest`` rows of one cell: value = metric(length L) - metric(shortest length), paired.

    Only for ``tasks`` whose items are the same at every length, in the same order (the prefix design's
    document i at every length; a task with ``Task.nested_lengths``): the contrast then has a paired
    interval and test, like ``*_vs_base``. The shortest length of each (task, depth) is the reference.
    """
    groups: dict[tuple[str, float | None], list[int]] = {}
    for task, length, depth in items:
        if paired_task(task) in tasks:
            groups.setdefault((task, depth), []).append(length)
    rows = []
    for (task, depth), lengths in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1.0)):
        shortest = min(lengths)
        reference = items[(task, shortest, depth)]
        longer = {(task, n, depth): items[(task, n, depth)] for n in sorted(lengths) if n != shortest}
        base = {key: reference for key in longer}
        rows += contrast_rows(cell, longer, base, suffix=VS_SHORTEST)
    return rows


def _is_out_of_memory(err: BaseException) -> bool:
    import torch

    text = str(err).lower()
    return (
        isinstance(err, (torch.OutOfMemoryError, MemoryError))
        or "out of memory" in text
        or "can't allocate" in text
    )
